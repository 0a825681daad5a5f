"""What a CUDA submission's build compiles, and what the grader's binding object takes off it (issue 17, throughput).

A submission's main.cpp holds two things: the learner's binding (host layout) and the pybind11 module load_inline
generates from the exercise's declarations. The second is the same for every submission of an exercise, and it is
what needs all of torch/extension.h. ``cuda_build.prepare_binding`` compiles it once (module.o) and a submission's
build then compiles host.cpp (its binding, with a precompiled torch/types.h) and its .cu file, and links module.o.

For lesson 04's two CUDA exercises (the solution workbook's sources), this script compiles each translation unit
with exactly the command torch's build would run, timed one at a time: main.cpp as built today (with the
precompiled torch/extension.h of ``prepare_shared``), its two halves apart (host.cpp: the binding alone, with and
without the precompiled torch/types.h; module.cpp: the module alone), an empty file that includes
torch/extension.h (what every such file pays), the .cu file, and the link. Then, per submission: cold today
(main.cpp + .cu + link) against with the object (host.cpp + .cu + link; split-layout sources: the .cu file with the
stub + link). Seconds are wall and CPU (user + system of the compiler), the best of ``--repeat`` runs: on a shared
machine the CPU seconds are the steadier figure. Run it on one core (``taskset -c 0``).

On a machine without a GPU (a CPU-only torch) it compiles only, with the recipe a CUDA build of this torch would use
(``cuda_build.compile_only_recipe``), and links against the CPU libraries and CUDA's runtime; on a GPU it also
builds each exercise through ``cuda_build.build`` cold, without and with the object, and checks the result.

    taskset -c 0 python lab/explore_cuda_binding.py            # -> lab/results/<gpu|cpu>-explore-...
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXERCISES = {"block_sum": ("BLOCK_SUM", ["block_sum_cuda"]), "sum_many": ("SUM_MANY", ["sum_many_cuda"])}


def _run(cmd, cwd, repeat: int) -> dict:
    """Best wall and CPU seconds of ``repeat`` runs of ``cmd``; AssertionError with the compiler's output if it
    fails."""
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if proc.returncode != 0:
            raise AssertionError(f"{shlex.join(cmd)} failed:\n{proc.stderr[-4000:]}")
    return {"wall_s": round(min(walls), 2), "cpu_s": round(min(cpus), 2), "wall_runs": [round(w, 2) for w in walls]}


def _nvcc_command(cuda_build, recipe: dict, extra_include: str | None) -> list:
    """torch's nvcc command for a .cu file of an extension (cuda_cflags of the build.ninja it writes), with the
    course's flags; CPU mode: the CUDA home and arch a CUDA torch would find."""
    with cuda_build.as_cuda_torch():
        lines = cuda_build.torch_ninja_vars(cuda_build.MAIN_CFLAGS, cuda_build.NVCC_FLAGS)
    flags = shlex.split(lines["cuda_cflags"]) + shlex.split(lines.get("cuda_post_cflags", ""))
    return [*shlex.split(lines["nvcc"]), *flags, *(["-isystem", extra_include] if extra_include else [])]


def compile_units(cuda_build, name: str, kernels: str, binding: str, cpp: str, functions: list, recipe: dict,
                  ext_pch: str | None, obj: dict, nvcc: list, link_libs: list, work: str, repeat: int) -> dict:
    """Every translation unit of one exercise's build, today's and with the binding object, compiled and timed."""
    os.makedirs(work, exist_ok=True)
    layout = cuda_build.layouts(kernels, binding)[0]
    ext_name = f"{name}_0123456789abcdef"
    defs = "".join(f'm.def("{f}", torch::wrap_pybind_function({f}), "{f}");\n' for f in functions)
    main = "#include <torch/extension.h>\n"
    if layout == "host":
        main += cuda_build.BINDING_HEADERS + cuda_build.host_binding(kernels, binding) + "\n"
        cu_today = cuda_build.kernels_source(kernels, "cuda.cu")
    else:
        cu_today = cuda_build.cuda_source(kernels, binding, True, "cuda.cu")
    files = {"main.cpp": main + cpp + f"\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{\n{defs}}}\n",
             "cuda.cu": cu_today, "empty.cpp": "#include <torch/extension.h>\nint gpucourse_empty;\n",
             "module.cpp": cuda_build.module_source(cpp, functions, f"{cuda_build.BINDING_MODULE}_{obj['key']}")}
    bound = cuda_build.bound_sources(layout, kernels, binding, cpp, obj["key"], "cuda.cu")
    files.update({f"bound_{k}": v for k, v in bound.items()})
    for fname, text in files.items():
        with open(os.path.join(work, fname), "w") as f:
            f.write(text)
    cxx = [*recipe["cxx"], *recipe["flags"], f"-DTORCH_EXTENSION_NAME={ext_name}"]
    ext_inc = ["-include", ext_pch, "-Winvalid-pch"] if ext_pch else []
    host_inc = ["-include", obj["host_header"], "-Winvalid-pch"] if obj["host_header"] else []
    steps = {
        "main.cpp (today, precompiled torch/extension.h)": (cxx + ext_inc + ["-c", "main.cpp", "-o", "main.o"]),
        "empty.cpp (torch/extension.h alone, precompiled)": (cxx + ext_inc + ["-c", "empty.cpp", "-o", "empty.o"]),
        "module.cpp (the module alone: once per exercise)": (cxx + ext_inc + ["-c", "module.cpp", "-o", "module.o"]),
        "cuda.cu (today)": nvcc + ["-c", "cuda.cu", "-o", "cuda.o"],
    }
    if layout == "host":
        steps["host.cpp (the binding alone, precompiled torch/types.h)"] = (
            cxx + host_inc + ["-c", "bound_host.cpp", "-o", "host.o"])
        steps["host.cpp (the binding alone, torch/types.h parsed)"] = cxx + ["-c", "bound_host.cpp", "-o", "host.o"]
        steps["link (today: main.o cuda.o)"] = [*recipe["cxx"], "-shared", "main.o", "cuda.o", "-o", "today.so",
                                                *link_libs]
        steps["link (host.o cuda.o module.o)"] = [*recipe["cxx"], "-shared", "host.o", "cuda.o", obj["object"], "-o",
                                                 "bound.so", *link_libs]
    else:
        steps["cuda.cu (with the stub)"] = nvcc + ["-c", "bound_cuda.cu", "-o", "bound_cuda.o",
                                                   f"-DTORCH_EXTENSION_NAME={ext_name}"]
        steps["link (today: main.o cuda.o)"] = [*recipe["cxx"], "-shared", "main.o", "cuda.o", "-o", "today.so",
                                                *link_libs]
        steps["link (cuda.o module.o)"] = [*recipe["cxx"], "-shared", "bound_cuda.o", obj["object"], "-o",
                                          "bound.so", *link_libs]
    out = {"layout": layout, "steps": {}}
    for label, cmd in steps.items():
        out["steps"][label] = _run(cmd, work, repeat)
        print(f"  {name:10} {label:58} {out['steps'][label]['wall_s']:7.2f} s wall "
              f"{out['steps'][label]['cpu_s']:7.2f} s cpu", flush=True)
    s = out["steps"]
    link_today = s["link (today: main.o cuda.o)"]
    if layout == "host":
        parts_today = [s["main.cpp (today, precompiled torch/extension.h)"], s["cuda.cu (today)"], link_today]
        parts_bound = [s["host.cpp (the binding alone, precompiled torch/types.h)"], s["cuda.cu (today)"],
                       s["link (host.o cuda.o module.o)"]]
    else:
        parts_today = [s["main.cpp (today, precompiled torch/extension.h)"], s["cuda.cu (today)"], link_today]
        parts_bound = [s["cuda.cu (with the stub)"], s["link (cuda.o module.o)"]]
    for key, parts in (("per_submission_today", parts_today), ("per_submission_with_object", parts_bound)):
        out[key] = {u: round(sum(p[u] for p in parts), 2) for u in ("wall_s", "cpu_s")}
    out["speedup_cpu"] = round(out["per_submission_today"]["cpu_s"] / out["per_submission_with_object"]["cpu_s"], 2)
    return out


def gpu_builds(cuda_build, name, kernels, binding, cpp, functions, folder) -> dict:
    """GPU mode: cuda_build.build cold (a fresh cache; the precompiled torch/extension.h as the grader's workers get
    it), without and with the binding object in ``folder``; each module's answer checked on three sizes."""
    import torch

    xs = [torch.rand(n, device="cuda") - 0.25 for n in (1, 1025, 300_001)]
    want = torch.stack([x.double().sum() for x in xs]).float()
    out = {}
    for label, obj in (("without the object", None), ("with the object", folder)):
        cuda_build._prepared.pop("binding", None)
        os.environ.pop(cuda_build.BINDING_ENV, None)
        if obj:
            os.environ[cuda_build.BINDING_ENV] = obj
        os.environ["GPUCOURSE_CACHE"] = tempfile.mkdtemp(prefix="binding-gpu-")
        cuda_build.forget_loaded()
        t0 = time.perf_counter()
        mod = cuda_build.build(name, kernels, binding, cpp, functions)
        seconds = time.perf_counter() - t0
        fn = getattr(mod, functions[0])
        got = torch.stack([fn(x) for x in xs]) if name == "block_sum" else fn(xs)
        right = bool(torch.allclose(got.float(), want, rtol=1e-5, atol=1e-4))
        out[label] = {"build_s": round(seconds, 2), "layout": getattr(mod, "build_layout", "?"), "right": right}
        print(f"  {name:10} build() {label:20} {seconds:6.1f} s  {out[label]}", flush=True)
    os.environ.pop(cuda_build.BINDING_ENV, None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="JSON path (default: lab/results/<gpu|cpu>-explore-cuda-binding.json)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="explore-cuda-binding-")
    os.environ["GPUCOURSE_CACHE"] = os.path.join(cache, "cache")  # before the course reads it: a cold cache
    import torch

    from gpucourse import cuda_build, specs
    from gpucourse.solutions import load_solutions

    on_gpu = torch.cuda.is_available()
    include = None
    if cuda_build.pch_recipe() is None:  # a torch without CUDA: compile only
        include = os.path.join(cache, "include")
        recipe = cuda_build.compile_only_recipe(include)
        if recipe is None:
            sys.exit("no recipe: this needs nvcc, g++ and torch's extension headers")
        cuda_build._recipe_cache["recipe"] = recipe
    recipe = cuda_build.pch_recipe()
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    cudart = os.path.join(cuda_build.cuda_home() or "/usr/local/cuda", "lib64")
    link_libs = ([f"-L{lib}", "-lc10", "-lc10_cuda", "-ltorch_cpu", "-ltorch_cuda", "-ltorch", "-ltorch_python"]
                 if on_gpu else [f"-L{lib}", "-lc10", "-ltorch_cpu", "-ltorch", "-ltorch_python"])
    link_libs += [f"-L{cudart}", "-lcudart"]
    nvcc = _nvcc_command(cuda_build, recipe, include)
    rec = {"what": __doc__.split("\n\n")[0], "machine": None, "torch": torch.__version__,
           "compiler": recipe["compiler"], "nvcc": subprocess.run([cuda_build.nvcc_path(), "--version"],
                                                                  capture_output=True, text=True).stdout.split(
               "\n")[-2:-1], "python": platform.python_version(), "cpus": os.cpu_count(),
           "cores_used": len(os.sched_getaffinity(0)), "repeat": args.repeat, "date": time.strftime("%Y-%m-%d"),
           "load_average_at_start": [round(v, 2) for v in os.getloadavg()],
           "note": "wall_s includes waiting for the core while other jobs run on the machine; cpu_s is the "
                   "compiler's own user + system time, the figure to compare (each the best of the runs)",
           "once_per_machine": {}, "once_per_exercise": {}, "exercises": {}}
    if on_gpu:
        rec["machine"] = torch.cuda.get_device_name(0)
    else:
        rec["machine"] = (f"CPU only ({os.cpu_count()} cores, no GPU): compile only, with the recipe a CUDA build of "
                          f"torch {torch.__version__} would use; nothing built here runs")
    print(f"{rec['machine']}; {len(os.sched_getaffinity(0))} core(s) used; best of {args.repeat}", flush=True)
    host_pch = (lambda: cuda_build._build_pch(dict(recipe, header=cuda_build.HOST_PCH_TEXT),
                                              cuda_build.HOST_PCH_HEADER))
    for label, fn in (("precompiled torch/extension.h (prepare_shared)", cuda_build.prepare_shared),
                      ("precompiled torch/types.h (prepare_binding's first call)", host_pch)):
        t0 = time.perf_counter()
        folder = fn()
        rec["once_per_machine"][label] = {"wall_s": round(time.perf_counter() - t0, 2), "built": bool(folder)}
        print(f"  {label}: {rec['once_per_machine'][label]}", flush=True)
    ext_pch = cuda_build.shared_header()
    if ext_pch:  # as the grader gives it to its workers, whatever their cache
        os.environ[cuda_build.SHARED_ENV] = os.path.dirname(ext_pch)
    ns = load_solutions("04_cuda_reduction")
    for name, (prefix, functions) in EXERCISES.items():
        kernels, binding, cpp = ns[f"{prefix}_KERNELS"], ns[f"{prefix}_BINDING"], ns[f"{prefix}_CPP"]
        t0 = time.perf_counter()
        folder = cuda_build.prepare_binding(cpp, functions)
        seconds = round(time.perf_counter() - t0, 2)
        if folder is None:
            sys.exit(f"prepare_binding failed for {name}")
        rec["once_per_exercise"][name] = {"prepare_binding_wall_s": seconds, "object_bytes":
                                          os.path.getsize(os.path.join(folder, cuda_build.BINDING_OBJECT))}
        obj = cuda_build.binding_object(cpp, functions)
        rec["exercises"][name] = compile_units(cuda_build, name, kernels, binding, cpp, functions, recipe, ext_pch,
                                               obj, nvcc, link_libs, os.path.join(cache, name), args.repeat)
        if on_gpu:
            rec["exercises"][name]["build"] = gpu_builds(cuda_build, name, kernels, binding, cpp, functions, folder)
        e = rec["exercises"][name]
        print(f"  {name}: per submission today {e['per_submission_today']}, with the object "
              f"{e['per_submission_with_object']}: {e['speedup_cpu']}x less compiler CPU", flush=True)
    rec["load_average_at_end"] = [round(v, 2) for v in os.getloadavg()]
    prefix = specs.slug() if on_gpu else "cpu"
    out = args.out or os.path.join(ROOT, "lab", "results", f"{prefix}-explore-cuda-binding.json")
    with open(out, "w") as f:
        json.dump(rec, f, indent=1)
    print(f"wrote {out}")
    shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
