"""Each grading worker in a bubblewrap sandbox (the sandbox Flatpak uses), or at the process level where there is none.

Under bubblewrap (``bwrap``) a worker gets:

* its own PID namespace (``--unshare-pid``, with bwrap's own init as PID 1 and ``--die-with-parent``): when the
  worker exits or is killed, every process it started dies with it, double-forked daemons in new sessions included;
  it sees no other process on the machine;
* no network (``--unshare-net``: a loopback interface of its own, no route out), and its own IPC and UTS namespaces;
* a user namespace (``--unshare-user``, uid 1000 inside, no capabilities, ``--disable-userns`` where bwrap has it);
* a read-only view of the system (``/usr`` and the ``/bin``, ``/lib*`` links, a short list of files from ``/etc``),
  of Python (its prefixes, the site-packages holding torch, triton and the rest) and of the course package; nothing
  else of the machine: not the checkout's ``solutions/``, ``exercises/``, ``notebooks/`` or ``tests/``, no other
  submission, no home directory;
* its own submission, read-only, at ``/submission/<file name>``;
* one writable place, its private temporary directory, mounted at ``/tmp`` (HOME and every build cache are there;
  the grader deletes it afterwards); the root and everything else is read-only;
* a fresh ``/proc`` (its own processes only) and a minimal ``/dev`` (null, zero, random, tty, a 64 MiB ``/dev/shm``
  of its own), plus the NVIDIA device nodes (``/dev/nvidia*``) and ``/sys`` read-only when grading on a GPU;
* the environment the grader builds from its allow-list (grader._worker_env), nothing else.

Where bwrap is missing or cannot create its namespaces (user namespaces switched off, a container that forbids
them), the grader grades anyway at the process level (own session, resource limits, allow-listed environment) and
says so: every report records the level (:func:`detect`) and ``gpucourse doctor`` prints it with the way to the full
one. ``GPUCOURSE_ISOLATION=process`` (or ``gpucourse grade --isolation process``) forces the process level, e.g. to
debug a worker; ``bubblewrap`` refuses to grade without the sandbox.
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import importlib.util
import os
import shutil
import subprocess
import sys

ENV_VAR = "GPUCOURSE_ISOLATION"  # auto (default), bubblewrap (required), process (forced)
CHOICES = ("auto", "bubblewrap", "process")
INSIDE_TMP = "/tmp"  # where the worker's private temporary directory is mounted inside the sandbox
INSIDE_SUBMISSION = "/submission"  # the folder holding the submission file, read-only, inside the sandbox
SHM_BYTES = 64 << 20  # the sandbox's /dev/shm (a tmpfs, so memory), where bwrap can size it (0.8+)
SANDBOX_UID = 1000  # the worker's uid (and gid) inside its user namespace: never 0
PYTHON_PACKAGES = ("torch", "triton", "numpy", "IPython", "matplotlib", "nbformat", "ninja")  # where they live: bound
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "passwd", "group",
             "nsswitch.conf", "alternatives", "fonts", "os-release", "mime.types")
SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")  # merged-/usr links, or real directories
GPU_DEVICES = ("/dev/nvidia[0-9]*", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
               "/dev/nvidia-modeset", "/dev/nvidia-caps")
# In GPU mode the probe also starts CUDA inside the sandbox (once per batch, a few seconds): a device node it needs
# and does not get would otherwise fail every submission.
GPU_PROBE = "import sys, torch; sys.exit(0 if torch.cuda.is_available() and torch.zeros(1, device='cuda').sum() == 0 " \
            "else 3)"
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora: `sudo dnf install "
                "bubblewrap`; `make install` does it when run as root)")
USERNS_HINT = ("allow unprivileged user namespaces (Debian: `sudo sysctl -w kernel.unprivileged_userns_clone=1`; "
               "Ubuntu 24.04+: `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`, or an AppArmor "
               "profile for bwrap; in Docker, a seccomp profile that permits unshare), or grade as root")


@dataclasses.dataclass(frozen=True)
class Isolation:
    """The isolation a batch is graded with: ``level`` "bubblewrap" or "process", and one line saying what that
    covers, or why the full level is not available and how to get it."""
    level: str
    detail: str
    bwrap: str | None = None  # the bwrap binary, when level is "bubblewrap"
    userns: bool = True  # bwrap may create a user namespace (False: root, namespaces without one)
    disable_userns: bool = False  # this bwrap has --disable-userns

    def to_dict(self) -> dict:
        return {"level": self.level, "detail": self.detail}

    @property
    def sandboxed(self) -> bool:
        return self.level == "bubblewrap"


def requested(choice: str | None = None) -> str:
    """The isolation asked for: ``choice`` (the CLI's --isolation) or $GPUCOURSE_ISOLATION, default "auto"."""
    value = (choice or os.environ.get(ENV_VAR) or "auto").strip().lower()
    if value not in CHOICES:
        raise ValueError(f"unknown isolation {value!r} (from {'--isolation' if choice else ENV_VAR}): "
                         f"choose one of {', '.join(CHOICES)}")
    return value


def detect(choice: str | None = None) -> Isolation:
    """The isolation this machine gives (``choice``: see :func:`requested`). Probes bwrap once per process with the
    very mounts a worker gets (the interpreter must start inside). Raises RuntimeError when "bubblewrap" is
    required and not available."""
    want = requested(choice)
    if want == "process":
        return Isolation("process", f"process level only, forced ({ENV_VAR}=process or --isolation process): "
                                    f"submissions can read and write what the grader's user can")
    found = _probe(_gpu())
    if want == "bubblewrap" and not found.sandboxed:
        raise RuntimeError(f"bubblewrap isolation was required but is not available: {found.detail}")
    return found


def _gpu() -> bool:
    from .. import device

    return device.on_gpu()


@functools.lru_cache(maxsize=None)
def _probe(gpu: bool) -> Isolation:
    bwrap = shutil.which("bwrap")
    fallback = "process level only: submissions can read and write what the grader's user can"
    if not bwrap:
        return Isolation("process", f"{fallback} (bubblewrap is not installed: {INSTALL_HINT})")
    disable = _has_option(bwrap, "--disable-userns")
    errors = []
    # With a user namespace first (uid 1000 inside, no capabilities); as root without one when the kernel or a
    # container forbids them (bwrap drops every capability either way).
    for userns in ((True, False) if os.geteuid() == 0 else (True,)):
        iso = Isolation("bubblewrap", "", bwrap, userns, disable and userns)
        tmp = _probe_dir()
        try:
            cmd = command(iso, [sys.executable, "-c", GPU_PROBE if gpu else "import sys; sys.exit(0)"], tmp, None,
                          gpu)
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp, env=_probe_env())
        except (OSError, subprocess.SubprocessError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if proc.returncode == 0:
            spaces = "PID, network, IPC and user" if userns else "PID, network and IPC"
            return dataclasses.replace(iso, detail=(
                f"bubblewrap: own {spaces} namespaces, no capabilities, read-only system and course package, only "
                f"its own submission and an empty private /tmp visible" +
                ("" if userns else " (as root without a user namespace: the kernel refused one)")))
        if gpu and proc.returncode == 3:
            errors.append("CUDA sees no GPU inside the sandbox (a device node missing from GPU_DEVICES?)")
            continue
        errors.append((proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1][:300])
    why = "; ".join(dict.fromkeys(errors)) or "unknown"
    hint = fix_hint(why)
    return Isolation("process", f"{fallback} (bubblewrap is installed at {bwrap} but could not start a sandbox: "
                                f"{why}; to fix: {hint})")


def fix_hint(why: str) -> str:
    """How to fix a sandbox that bwrap could not start, from its error line(s) ``why``."""
    if "namespace" in why or "ermission" in why or "not permitted" in why:
        return USERNS_HINT
    if "CUDA" in why:
        return "check the NVIDIA device nodes under /dev (GPU_DEVICES in gpucourse/grading/sandbox.py)"
    if "Unknown option" in why or "nrecognized option" in why:
        return "this bwrap is older than an option the grader gives it: install a newer bubblewrap"
    if "Can't find source path" in why:
        return ("a folder the grader binds into the sandbox is gone (a virtual environment, $LD_LIBRARY_PATH or a "
                "toolchain moved while grading?)")
    return "run the bwrap command of sandbox.command by hand to see why"


def _probe_dir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="gpucourse-probe-")


def _probe_env() -> dict:
    keep = ("PATH", "LANG", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES")
    return dict({k: v for k, v in os.environ.items() if k in keep or k.startswith("NVIDIA_")}, HOME=INSIDE_TMP)


@functools.lru_cache(maxsize=None)
def _has_option(bwrap: str, option: str) -> bool:
    try:
        out = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return option in out.stdout + out.stderr


def inside_path(submission: str) -> str:
    """Where ``submission`` is seen inside the sandbox."""
    return os.path.join(INSIDE_SUBMISSION, os.path.basename(submission))


def command(iso: Isolation, argv: list, tmp: str, submission: str | None, gpu: bool, as_pid_1: bool = False,
            tools: tuple = ()) -> list:
    """``argv`` wrapped in bwrap with the worker's view of the machine: ``tmp`` (the host's private temporary
    directory) mounted writable at /tmp, ``submission`` read-only at /submission/<name>. ``as_pid_1``: ``argv`` is
    the sandbox's PID 1 (instead of bwrap's own init), where this bwrap can (``--as-pid-1``): the graded worker's
    supervisor (worker.SUPERVISOR), which no process of the sandbox can then kill or stop (the kernel drops their
    signals to their namespace's init); it reaps the orphans, and when it exits every process left in the sandbox
    is killed. ``tools``: more folders to bind read-only where they are outside /usr (Nsight Compute's, for
    ``gpucourse grade --profile``: ncu.install_dirs)."""
    cmd = [iso.bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if as_pid_1 and _has_option(iso.bwrap, "--as-pid-1"):
        cmd += ["--as-pid-1"]
    if iso.userns:
        cmd += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
        if iso.disable_userns:
            cmd += ["--disable-userns"]
    cmd += _system_binds()
    # The private /tmp first: a checkout or virtual environment that lives under /tmp (a CI clone) is bound on top
    # of it below; mounted after them, /tmp would hide the interpreter itself.
    cmd += ["--bind", tmp, INSIDE_TMP]
    masks = _masks()
    for path in masks:
        cmd += ["--tmpfs", path]
    for path in _python_dirs() if not tools else _with_tools(tuple(tools)):
        cmd += ["--ro-bind", path, path]
    from .. import cuda_build

    from . import pycache

    for path in cuda_build.worker_binds() + pycache.worker_binds():  # what the grader built for every worker
        cmd += ["--ro-bind", path, path]  # (precompiled headers, the binding object, compiled bytecode)
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    if _has_option(iso.bwrap, "--size"):  # the sandbox's own /dev/shm, small: it is memory
        cmd += ["--size", str(SHM_BYTES), "--tmpfs", "/dev/shm"]
    if gpu:
        cmd += _gpu_binds()
    if submission is not None:
        cmd += ["--ro-bind", os.path.abspath(submission), inside_path(submission)]
    for path in masks:
        cmd += ["--remount-ro", path]
    cmd += ["--remount-ro", "/", "--chdir", INSIDE_TMP, "--"]
    return cmd + list(argv)


def _system_binds() -> list:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in SYSTEM_LINKS:
        path = "/" + name
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for name in ETC_FILES:
        path = os.path.join("/etc", name)
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


@functools.lru_cache(maxsize=None)
def _python_dirs() -> tuple:
    """What a worker needs of Python and the course, read-only: the interpreter's prefixes, its site-packages, the
    folders holding the packages a worker imports, the course package itself (only it: in a checkout its parent
    also holds solutions/ and tests/), the libraries on $LD_LIBRARY_PATH and the build tools (toolchain_dirs),
    where they are outside /usr."""
    import site

    import gpucourse

    dirs = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
            os.path.dirname(os.path.realpath(sys.executable))]
    dirs += list(site.getsitepackages())
    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if user_site:
        dirs.append(user_site)
    for name in PYTHON_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin:
            dirs.append(os.path.dirname(os.path.dirname(spec.origin)) if spec.submodule_search_locations
                        else os.path.dirname(spec.origin))
    dirs += os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
    dirs += toolchain_dirs()
    return select_dirs(dirs, os.path.dirname(os.path.abspath(gpucourse.__file__)), tuple(_masks()))


def _with_tools(tools: tuple) -> tuple:
    """:func:`_python_dirs` and ``tools``, selected as they are (outside /usr, not a checkout, none inside another)."""
    import gpucourse

    return select_dirs(list(_python_dirs()) + list(tools), os.path.dirname(os.path.abspath(gpucourse.__file__)),
                       tuple(_masks()))


def toolchain_dirs() -> list:
    """The prefixes of the build tools a worker runs: the CUDA toolkit (nvcc, for CUDA exercises); Triton compiles
    its launcher with ``$CC``, else gcc, else clang; ``torch.utils.cpp_extension`` calls c++ and ninja. A tool
    installed outside /usr (the H100 machine's gcc is /opt/gcc/bin/gcc) must be bound, or every Triton kernel fails
    to build inside the sandbox."""
    out = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", "")]
    try:
        from .. import cuda_build

        nvcc = cuda_build.nvcc_path()
        if nvcc:  # the CUDA toolkit's prefix (bin/nvcc, include/, lib64/)
            out.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    except Exception:  # no toolkit: nothing to bind
        pass
    for name in (os.environ.get("CC"), os.environ.get("CXX"), "cc", "gcc", "clang", "c++", "g++", "ninja"):
        path = shutil.which(name) if name else None
        if path:
            for p in {path, os.path.realpath(path)}:  # /opt/gcc/bin/gcc -> /opt/gcc (bin/, lib/, libexec/ inside)
                out.append(os.path.dirname(os.path.dirname(p)))
    return out


def select_dirs(dirs: list, package: str, masks: tuple = ()) -> tuple:
    """The folders to bind read-only, from candidates ``dirs``: absolute, existing, outside /usr (bound whole) or
    inside one of the ``masks`` (checkouts under /usr hidden by :func:`_masks`: a virtual environment kept in one
    is bound back), none inside another; plus the course ``package``. When the package sits in a source checkout
    (its parent holds pyproject.toml or solutions/), neither the checkout nor anything above it is bound, only the
    package itself (a virtual environment kept inside the checkout still is)."""
    checkouts = _checkouts(package) + list(masks)
    dirs = [d for d in dirs if d and os.path.isabs(d)]  # a relative entry would bind wherever the grader runs
    dirs = [os.path.normpath(d) for d in dirs] + [os.path.realpath(d) for d in dirs]  # a symlinked venv: both
    kept = []
    for d in dirs:
        masked = any(d != m and d.startswith(m + os.sep) for m in masks)
        if not os.path.isdir(d) or d in ("/", "/usr") or (d.startswith("/usr/") and not masked) or any(
                os.path.commonpath([d, c]) == d for c in checkouts):
            continue
        if not any(d == k or d.startswith(k + os.sep) for k in kept):
            kept = [k for k in kept if not k.startswith(d + os.sep)] + [d]
    kept += [package, os.path.realpath(package)]
    return tuple(sorted(set(kept)))


def _checkouts(package: str) -> list:
    """The source checkout the course ``package`` sits in (its parent, when that holds pyproject.toml or
    solutions/), as given and as resolved; [] for an installed package."""
    parent = os.path.dirname(package)
    return sorted(c for c in {parent, os.path.realpath(parent)} if os.path.exists(os.path.join(c, "pyproject.toml"))
                  or os.path.isdir(os.path.join(c, "solutions")))


def _masks() -> list:
    """Checkouts inside /usr (bound whole; e.g. /usr/src/app in a container image): each is hidden under an empty
    read-only tmpfs before the package (and a virtual environment inside it) is bound back. Besides the one the
    package sits in, the checkout it was installed from (``pip install .`` in a Dockerfile's ``WORKDIR
    /usr/src/app``: the package is in site-packages, the checkout with its ``solutions/`` stays behind) and the
    grader's working directory, where either is a checkout."""
    import gpucourse

    found = _checkouts(os.path.dirname(os.path.abspath(gpucourse.__file__))) + installed_from()
    found += _checkouts(os.path.join(os.getcwd(), "gpucourse"))  # _checkouts looks at the parent of its argument
    return sorted({c for c in found if c.startswith("/usr/")})


def installed_from(distribution: str = "gpucourse") -> list:
    """The local folder ``distribution`` was pip-installed from (its ``direct_url.json``, PEP 610), as given and
    resolved, where that folder is a checkout (pyproject.toml or solutions/); [] otherwise."""
    import importlib.metadata
    import json
    import urllib.parse

    try:
        info = json.loads(importlib.metadata.distribution(distribution).read_text("direct_url.json") or "{}")
        url = urllib.parse.urlparse(str(info.get("url", "")))
    except Exception:  # not installed, installed another way, or an unreadable record: nothing to hide
        return []
    if url.scheme != "file" or not url.path:
        return []
    return _checkouts(os.path.join(urllib.parse.unquote(url.path), "gpucourse"))


def _gpu_binds() -> list:
    """The NVIDIA device nodes (read-write: CUDA opens them so) and /sys read-only (the driver and NVML read it)."""
    args = []
    for pattern in GPU_DEVICES:
        for path in sorted(glob.glob(pattern)):
            args += ["--dev-bind", path, path]
    if os.path.isdir("/sys"):
        args += ["--ro-bind", "/sys", "/sys"]
    return args
