"""What `gpucourse grade` must say of submissions that try to escape the grader's sandbox (graded as vector_add).

Each tries one escape of issue 17's first class and must not succeed; its verdict and message show that it did not.
Without the sandbox these escapes work (and escape_write_package.py would plant a module in the checkout's
package), so the folder is graded only where `gpucourse grade` runs under bubblewrap (SANDBOX): elsewhere the test is
skipped with the isolation the machine has. tests/test_sandbox.py holds the escapes that need more than a verdict to
prove (no process outlives its worker, a later batch is unchanged, no local network, no planted files on disk).
"""
EXERCISE = "vector_add"
SANDBOX = True
EXPECTED = {
    # Another submission of the same batch: neither beside its own file nor in the folder its mount came from.
    "escape_read_classmate.py": {"status": "error", "message": "raised FileNotFoundError: found no other submission"},
    # The instructor's solved workbook in the checkout: only the course package is visible, not the checkout.
    "escape_load_solution_workbook.py": {"status": "error",
                                         "message": "raised FileNotFoundError while loading: no solution workbook"},
    # The grader's environment (a planted secret), through its own and every visible /proc/<pid>/environ.
    "escape_read_grader_env.py": {"status": "error", "message": "raised RuntimeError: found no secret in the "
                                                                "environments of"},
    # A .pyc planted in the package (and files in torch's folder, its own file): read-only.
    "escape_write_package.py": {"status": "error", "message": "Read-only file system"},
    # A setsid + double-fork daemon killing other workers: it dies with its worker; its neighbours pass.
    "escape_daemon.py": {"status": "passed", "message": "all 6 cases passed", "flags": ["starts other processes"]},
    "right_graded_beside_the_daemon.py": {"status": "passed", "message": "all 6 cases passed"},
    # The internet: no route out of the sandbox's network namespace.
    "escape_network.py": {"status": "error", "message": "Network is unreachable", "flags": ["uses the network"]},
    # The path the instructor gave (a student's name in it) through mountinfo, /proc/1/cmdline, __file__...: the
    # sandbox binds a staged copy named submission.py, so it finds nothing and passes (it would raise, naming where).
    "escape_read_host_paths.py": {"status": "passed", "message": "all 6 cases passed", "flags": ["reads /proc"]},
    # Its own os._exit(137) passed off as killed by SIGKILL, by killing the worker's supervisor or forging its report
    # through /proc/<pid>/fd: the supervisor is the sandbox's PID 1 and non-dumpable; the report says exit code 137.
    "escape_forge_supervisor_report.py": {"status": "crashed", "message": "the process exited (code 137)",
                                          "flags": ["exits or signals"]},
    # A forged reply on the worker's channel (a tensor for the case's index): the submission's tampering, never an
    # internal grader error (issue 39).
    "escape_forge_case_index.py": {"status": "error", "message": "tampering with the grader's channel: the worker sent "
                                                                 "a message it never sends (a reply for case 'Tensor'",
                                   "flags": ["tampered with the grader's channel"]},
}
GPU_ONLY = False
