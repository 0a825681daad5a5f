"""What the grader prepares once, before its workers start, so each CUDA submission compiles only its own code.

* a precompiled torch/extension.h (:func:`prepare_shared`) that every main.cpp of the split and host layouts
  includes, built with exactly the compiler and flags torch would use for main.cpp (:func:`pch_recipe`);
* the exercise's **binding object** (:func:`prepare_binding`): the pybind11 module load_inline generates from
  ``cpp`` and ``functions``, compiled once; a build whose declarations match links it (see the section below).

Both are read-only folders that the grader binds into its workers' sandboxes (:func:`worker_binds`,
:func:`worker_env`). Nothing here is needed for a notebook's build: without them, builds compile main.cpp whole.
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time

from . import launch_rewrite, sources, tools

SHARED_ENV = "GPUCOURSE_CUDA_SHARED"  # the folder of the precompiled torch/extension.h (set by the grader)
BINDING_ENV = "GPUCOURSE_CUDA_BINDING"  # the folder of the exercise's binding object (set by the grader)
PCH_HEADER = "gpucourse_torch_extension.h"  # in that folder, with its .gch beside it
# The precompiled header's text: what every main.cpp of the split and host layouts includes first.
PCH_TEXT = ("// gpucourse: precompiled once for every main.cpp of a split or host-layout CUDA build\n"
            "#include <torch/extension.h>\n" + sources.BINDING_HEADERS +
            "#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n")


# ---------------------------------------------------------------------------------------------------------------------
# The precompiled torch/extension.h shared by the grader's workers.

_recipe_cache: dict = {}


def torch_ninja_vars(extra_cflags=(), extra_cuda_cflags=()) -> dict:
    """The variables (cxx, cflags, nvcc, cuda_cflags...) of the build.ninja torch.utils.cpp_extension writes for an
    extension with a main.cpp and a cuda.cu and these extra flags: how torch would compile each file here."""
    import torch.utils.cpp_extension as ext

    write = ext._write_ninja_file_to_build_library
    with tempfile.TemporaryDirectory(prefix="gpucourse-ninja-") as d:
        args = dict(path=os.path.join(d, "build.ninja"), name="gpucourse_probe",
                    sources=[os.path.join(d, "main.cpp"), os.path.join(d, "cuda.cu")],
                    extra_cflags=list(extra_cflags), extra_cuda_cflags=list(extra_cuda_cflags), extra_sycl_cflags=[],
                    extra_ldflags=[], extra_include_paths=[], with_cuda=True, with_sycl=False, is_standalone=False)
        params = inspect.signature(write).parameters
        write(**{k: v for k, v in args.items() if k in params})
        with open(args["path"]) as f:
            return dict(re.findall(r"^(\w+) = ?(.*)$", f.read(), re.M))


@contextlib.contextmanager
def as_cuda_torch():
    """Within: torch's extension builder finds the CUDA toolkit (nvcc's) and an arch list (sm_90, the course's) even
    where torch has no CUDA, so it writes the commands a CUDA build of this torch would run (compile-only
    measurements and tests on a machine with nvcc but no GPU). Both are restored after."""
    import torch.utils.cpp_extension as ext

    saved = ext.CUDA_HOME, os.environ.get("TORCH_CUDA_ARCH_LIST")
    if ext.CUDA_HOME is None:
        ext.CUDA_HOME = tools.cuda_home()
    if saved[1] is None:
        os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
    try:
        yield
    finally:
        ext.CUDA_HOME = saved[0]
        if saved[1] is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)


def pch_recipe() -> dict | None:
    """How torch compiles an extension's main.cpp here (compiler and flags, read from the build.ninja that
    torch.utils.cpp_extension writes), without the extension's name; None where torch cannot say (no CUDA, an
    unexpected torch). The precompiled header is built with exactly these, so gcc accepts it for main.cpp."""
    if "recipe" in _recipe_cache:
        return _recipe_cache["recipe"]
    recipe = None
    try:
        import torch

        lines = torch_ninja_vars(tools.MAIN_CFLAGS)
        if lines.get("cxx") and "cflags" in lines:
            flags = [t for t in shlex.split(lines["cflags"]) + shlex.split(lines.get("post_cflags", ""))
                     if not t.startswith("-DTORCH_EXTENSION_NAME=")]
            cxx = shlex.split(lines["cxx"])
            version = subprocess.run([*cxx[-1:], "--version"], capture_output=True, text=True, timeout=60).stdout
            recipe = {"cxx": cxx, "flags": flags, "compiler": version.splitlines()[:1], "torch": torch.__version__,
                      "torch_path": os.path.dirname(torch.__file__), "header": PCH_TEXT}
    except Exception:  # no CUDA torch, no compiler, a torch whose internals moved: no precompiled header
        recipe = None
    _recipe_cache["recipe"] = recipe
    return recipe


def compile_only_recipe(folder: str) -> dict | None:
    """A torch without CUDA (CPU mode): the recipe a CUDA build of this torch would use, for measuring and testing
    the host compiles on a machine with nvcc but no GPU. Such a torch ships c10/cuda's headers without the one its
    CMake generates; a copy is written under ``folder`` and put on the include path. Only host compiles: nothing
    built with it can run. Returns the recipe (not cached as :func:`pch_recipe`'s; install it with
    ``_recipe_cache["recipe"] = ...``), or None where even this fails."""
    if pch_recipe() is not None:
        return pch_recipe()
    if tools.nvcc_path() is None or tools.cuda_home() is None:
        return None
    os.makedirs(os.path.join(folder, "c10", "cuda", "impl"), exist_ok=True)
    with open(os.path.join(folder, "c10", "cuda", "impl", "cuda_cmake_macros.h"), "w") as f:
        f.write("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    try:
        _recipe_cache.pop("recipe", None)
        with as_cuda_torch():
            recipe = pch_recipe()
    finally:
        _recipe_cache.pop("recipe", None)
    if recipe is not None:
        recipe["flags"] += ["-isystem", os.path.abspath(folder)]
    return recipe


def _pch_dir(recipe: dict) -> str:
    return os.path.join(tools.cache_dir(), "shared", "pch_" + tools._hash(json.dumps(recipe, sort_keys=True)))


def _pch_valid(folder: str, recipe: dict, header: str = PCH_HEADER) -> bool:
    try:
        with open(os.path.join(folder, "recipe.json")) as f:
            return json.load(f) == recipe and os.path.exists(os.path.join(folder, header + ".gch"))
    except (OSError, ValueError):
        return False


def _compile_in(tmp: str, cmd: list, what: str, verbose: bool) -> bool:
    """Run one compile of a shared artefact being built in the private folder ``tmp``; on failure ``tmp`` is removed
    (and, verbose, the compiler's last words printed) and False returned."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if verbose:
        print(f"{what} in {time.perf_counter() - t0:.1f} s: {shlex.join(cmd)}")
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        if verbose:
            print(proc.stderr[-3000:])
        return False
    return True


def _build_pch(recipe: dict, header: str, verbose: bool = False) -> str | None:
    """The folder (named after ``recipe``, whose ``header`` is the text) holding ``header`` and its .gch, compiled
    with the recipe's compiler and flags unless a valid one is there; None when the compiler fails."""
    folder = _pch_dir(recipe)
    if _pch_valid(folder, recipe, header):
        return folder
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="pch_tmp_", dir=os.path.dirname(folder))
    path = os.path.join(tmp, header)
    with open(path, "w") as f:
        f.write(recipe["header"])
    if not _compile_in(tmp, [*recipe["cxx"], "-x", "c++-header", path, "-o", path + ".gch", *recipe["flags"]],
                       f"precompiled {header}", verbose):
        return None
    with open(os.path.join(tmp, "recipe.json"), "w") as f:
        json.dump(recipe, f, sort_keys=True)
    # The folder's name is its recipe: moved into place whole, so a reader never sees half of one; a build by
    # another process that got there first is as good as this one.
    os.chmod(tmp, 0o755)
    try:
        os.rename(tmp, folder)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder if _pch_valid(folder, recipe, header) else None


def shared_header() -> str | None:
    """The precompiled torch/extension.h to ``-include`` in main.cpp: from $GPUCOURSE_CUDA_SHARED (the grader's),
    else from this cache (after :func:`prepare_shared`), when it was built for this compiler, these flags and this
    torch; else None (main.cpp parses the header itself, as before)."""
    recipe = pch_recipe()
    if recipe is None:
        return None
    for folder in (os.environ.get(SHARED_ENV), _pch_dir(recipe)):
        if folder and _pch_valid(folder, recipe):
            return os.path.join(folder, PCH_HEADER)
    return None


_prepared: dict = {}


def prepare_shared(verbose: bool = False) -> str | None:
    """Build (once per compiler, flags and torch; kept in the cache) the precompiled torch/extension.h that every
    main.cpp of a split build includes, and return its folder; None where it cannot be built (CPU mode, no compiler,
    an unexpected torch: builds then parse the header themselves). The grader calls this before its workers start
    and binds the folder read-only into their sandboxes (:func:`worker_binds`, :func:`worker_env`): a worker reads
    it and cannot change it. A build takes a single core about half a minute (the .gch is some 800 MB)."""
    recipe = pch_recipe()
    if recipe is None:
        return None
    folder = _build_pch(recipe, PCH_HEADER, verbose)
    if folder is None:
        return None
    _prepared["folder"] = folder
    return folder


def worker_env() -> dict:
    """Variables a grading worker needs for CUDA builds: the shared folder that :func:`prepare_shared` prepared in
    this process, the binding object's folder that :func:`prepare_binding` prepared, and $GPUCOURSE_CUDA_BUILD where
    it is set."""
    env = {SHARED_ENV: _prepared["folder"]} if _prepared.get("folder") else {}
    if _prepared.get("binding"):
        env[BINDING_ENV] = _prepared["binding"]
    if os.environ.get(sources.BUILD_ENV):
        env[sources.BUILD_ENV] = os.environ[sources.BUILD_ENV]
    return env


def worker_binds() -> list:
    """Folders to show a sandboxed worker read-only, at the same path: the ones :func:`prepare_shared` and
    :func:`prepare_binding` prepared (the precompiled headers, the binding object)."""
    return [_prepared[k] for k in ("folder", "binding", "host_pch") if _prepared.get(k)]


# ---------------------------------------------------------------------------------------------------------------------
# The binding object: the Python module's half of main.cpp, compiled once per exercise by the grader.
#
# main.cpp holds two things: the learner's binding (host layout) and the pybind11 module that load_inline generates
# from ``cpp`` and ``functions`` (PYBIND11_MODULE, one m.def per function). The second is the same for every
# submission of an exercise, and it is what needs all of torch/extension.h: gcc instantiates the templates that
# header's inline code uses at the end of every translation unit that includes it, precompiled or not (about 9 s
# of one core for an empty file here; lab/results/cpu-explore-cuda-binding.json). So the grader compiles the
# module once (:func:`prepare_binding`) into a read-only folder, and a submission's build compiles only its own
# part, with the lighter torch/types.h (precompiled too), and links that object:
#   host layout:  host.cpp (binding + declarations + a stub) + cuda.cu (kernels) + module.o
#   split layout: cuda.cu (kernels + binding, the stub in its host part) + module.o
# Python imports an extension by calling PyInit_<its name>, and a build's name carries its hash; the object's own
# init function has a fixed name (PyInit_gpucourse_binding_<key>), and the stub, compiled with the submission,
# defines PyInit_<the build's name> as a call of it. Any failure of such a build falls back to the full main.cpp.

BINDING_MODULE = "gpucourse_binding"  # the object's module name: its init function is PyInit_<this>_<key>
BINDING_OBJECT = "module.o"
BOUND_FAILED = "gpucourse_binding_failed.txt"  # in a build folder: the build that links the object failed here
HOST_PCH_HEADER = "gpucourse_torch_types.h"
# What a host.cpp that links the binding object includes first: the binding's headers only (no pybind11).
HOST_PCH_TEXT = ("// gpucourse: precompiled once for every host.cpp that links a binding object\n" +
                 sources.BINDING_HEADERS +
                 "#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n")


def _binding_args(cpp, functions) -> tuple:
    if not isinstance(cpp, str):
        raise TypeError(f"cpp must be the C++ declarations as one string, not {type(cpp).__name__}")
    functions = [functions] if isinstance(functions, str) else list(functions)
    bad = [f for f in functions if not (isinstance(f, str) and f.isidentifier())]
    if not functions or bad:
        raise ValueError(f"functions must be C++ function names (identifiers), got {bad or functions!r}")
    return cpp, functions


def module_source(cpp: str, functions, init: str) -> str:
    """module.cpp: what load_inline generates for ``cpp`` and ``functions`` (torch/extension.h, the declarations,
    PYBIND11_MODULE with one m.def per function, torch's error handling), its init function ``PyInit_<init>``."""
    defs = "".join(f'm.def("{f}", torch::wrap_pybind_function({f}), "{f}");\n' for f in functions)
    return f"#include <torch/extension.h>\n{cpp}\nPYBIND11_MODULE({init}, m) {{\n{defs}}}\n"


def init_stub(binding_key: str) -> str:
    """The lines a submission's build adds to its own C++: PyInit_<TORCH_EXTENSION_NAME> (the name torch's build
    gives it, which Python calls) as a call of the binding object's init function."""
    return (f'extern "C" void* PyInit_{BINDING_MODULE}_{binding_key}(void);\n'
            "#define GPUCOURSE_PYINIT_(name) PyInit_##name\n#define GPUCOURSE_PYINIT(name) GPUCOURSE_PYINIT_(name)\n"
            'extern "C" __attribute__((visibility("default"))) void* GPUCOURSE_PYINIT(TORCH_EXTENSION_NAME)(void) {\n'
            f"  return PyInit_{BINDING_MODULE}_{binding_key}();\n}}\n")


def binding_key(cpp: str, functions, recipe: dict) -> str:
    """The object's key: the declarations, the function names (in order), the recipe (compiler and its version,
    flags, torch's version and path, Python's include path) and the generated code itself."""
    cpp, functions = _binding_args(cpp, functions)
    return tools._hash(cpp, functions, json.dumps(recipe, sort_keys=True), module_source(cpp, functions, "K"),
                       init_stub("K"), HOST_PCH_TEXT)


def _binding_dir(key: str) -> str:
    return os.path.join(tools.cache_dir(), "shared", f"binding_{key}")


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _binding_record(folder: str, cpp: str, functions, recipe: dict) -> dict | None:
    """The folder's binding.json when it is the object for exactly these declarations and this recipe, and the
    object is the one it records; None otherwise (another exercise's, another torch's, a changed file)."""
    try:
        key = binding_key(cpp, functions, recipe)
        if os.path.basename(os.path.normpath(folder)) != f"binding_{key}":
            return None
        with open(os.path.join(folder, "binding.json")) as f:
            record = json.load(f)
        want = {"key": key, "cpp": cpp, "functions": list(functions), "recipe": recipe}
        if any(record.get(k) != v for k, v in want.items()):
            return None
        if _sha256(os.path.join(folder, BINDING_OBJECT)) != record.get("object_sha256"):
            return None
        return record
    except (OSError, ValueError, TypeError):
        return None


def prepare_binding(cpp: str, functions, verbose: bool = False) -> str | None:
    """Compile, once per (declarations, function names, compiler, flags, torch), the pybind11 module of an
    exercise whose learners declare ``cpp`` and bind ``functions``, and return its folder (kept in the cache); None
    where it cannot be built (CPU mode, no compiler, declarations that do not compile: builds then compile main.cpp
    themselves, as before). Also precompiles the binding's headers for the submissions' host.cpp. The grader calls
    this before its workers start, after :func:`prepare_shared`, and binds the folders read-only into their
    sandboxes (:func:`worker_binds`, :func:`worker_env`). Raises ValueError/TypeError for malformed arguments."""
    cpp, functions = _binding_args(cpp, functions)
    for k in ("binding", "host_pch"):
        _prepared.pop(k, None)
    recipe = pch_recipe()
    if recipe is None:
        return None
    host_pch = _build_pch(dict(recipe, header=HOST_PCH_TEXT), HOST_PCH_HEADER, verbose)
    key = binding_key(cpp, functions, recipe)
    folder = _binding_dir(key)
    if _binding_record(folder, cpp, functions, recipe) is None:
        os.makedirs(os.path.dirname(folder), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix="binding_tmp_", dir=os.path.dirname(folder))
        src, obj = os.path.join(tmp, "module.cpp"), os.path.join(tmp, BINDING_OBJECT)
        with open(src, "w") as f:
            f.write(module_source(cpp, functions, f"{BINDING_MODULE}_{key}"))
        pch = shared_header()
        if not _compile_in(tmp, [*recipe["cxx"], "-c", src, "-o", obj, *recipe["flags"],
                                 *(["-include", pch] if pch else [])], "compiled the binding object", verbose):
            return None
        with open(os.path.join(tmp, "binding.json"), "w") as f:
            json.dump({"key": key, "cpp": cpp, "functions": functions, "recipe": recipe,
                       "object_sha256": _sha256(obj), "host_pch": host_pch}, f, sort_keys=True)
        for name in os.listdir(tmp):
            os.chmod(os.path.join(tmp, name), 0o444)
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, folder)  # whole, as the precompiled header's folder
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
        if _binding_record(folder, cpp, functions, recipe) is None:
            return None
    _prepared["binding"] = folder
    if host_pch:
        _prepared["host_pch"] = host_pch
    return folder


def binding_object(cpp: str, functions) -> dict | None:
    """The binding object a build of these declarations links instead of compiling main.cpp's module, or None.
    Only the grader's ($GPUCOURSE_CUDA_BINDING) or one :func:`prepare_binding` made in this process, and only when
    it was compiled for exactly ``cpp``, ``functions`` and this recipe (:func:`_binding_record`): a notebook's build
    never depends on one. ``{"folder", "object", "key", "host_header"}``; host_header is None when the precompiled
    torch/types.h is missing or was built for another recipe (host.cpp then parses the headers itself)."""
    folder = os.environ.get(BINDING_ENV) or _prepared.get("binding")
    if not folder:
        return None
    recipe = pch_recipe()
    if recipe is None:
        return None
    try:
        cpp, functions = _binding_args(cpp, functions)
    except (TypeError, ValueError):
        return None
    record = _binding_record(folder, cpp, functions, recipe)
    if record is None:
        return None
    host_pch = record.get("host_pch")
    valid = isinstance(host_pch, str) and _pch_valid(host_pch, dict(recipe, header=HOST_PCH_TEXT), HOST_PCH_HEADER)
    return {"folder": folder, "object": os.path.join(folder, BINDING_OBJECT), "key": record["key"],
            "host_header": os.path.join(host_pch, HOST_PCH_HEADER) if valid else None}


def bound_sources(layout: str, kernels: str, binding: str, cpp: str, binding_key_: str, cu_path: str) -> dict:
    """The files of a build that links the binding object: ``host``: host.cpp (the binding with its launches
    rewritten, then ``cpp`` as load_inline's main.cpp has it after the binding, so a definition that disagrees with
    its declaration fails here as it does there, then the init stub) and cuda.cu (the kernels); ``split``: cuda.cu
    alone, the stub in its host part."""
    stub = init_stub(binding_key_)
    if layout == "host":
        host = launch_rewrite.host_binding(kernels, binding)
        if host is None:
            raise ValueError("the host layout cannot carry this source")
        return {"host.cpp": sources.BINDING_HEADERS + host + "\n" + cpp + "\n" + stub,
                "cuda.cu": sources.kernels_source(kernels, cu_path)}
    if layout == "split":
        return {"cuda.cu": sources.cuda_source(kernels, binding, True, cu_path) + "\n#ifndef __CUDA_ARCH__\n" + stub +
                "#endif\n"}
    raise ValueError(f"no build links the binding object in the {layout!r} layout")


def _load_bound(name, key, kernels, binding, cpp, functions, flags, verbose, layout: str):
    """The build that links the binding object, in a folder of its own; None where there is no valid object, or
    this build failed (here or, recorded in the folder, in the grader's prebuild worker): the caller then builds
    main.cpp. The learner sees only the full build's messages."""
    obj = binding_object(cpp, functions) if layout in ("host", "split") else None
    if obj is None:
        return None
    full = f"{name}_{tools._hash(key, obj['key'])}"
    build_dir = os.path.join(tools.cache_dir(), full)
    failed = os.path.join(build_dir, BOUND_FAILED)
    if os.path.exists(failed):
        return None
    try:
        import torch.utils.cpp_extension as ext

        os.makedirs(build_dir, exist_ok=True)
        files = bound_sources(layout, kernels, binding, cpp, obj["key"],
                              os.path.join(os.path.abspath(build_dir), "cuda.cu"))
        for fname, text in files.items():
            path = os.path.join(build_dir, fname)
            if not os.path.exists(path) or open(path).read() != text:  # unchanged files keep ninja's up to date
                with open(path, "w") as f:
                    f.write(text)
        cflags = list(tools.MAIN_CFLAGS)
        if obj["host_header"]:
            cflags += ["-include", obj["host_header"], "-Winvalid-pch"]
        module = ext.load(name=full, sources=[os.path.join(build_dir, f) for f in files], extra_cflags=cflags,
                          extra_cuda_cflags=[*tools.NVCC_FLAGS, *flags], extra_ldflags=[obj["object"]],
                          build_directory=build_dir, verbose=verbose)
        if not all(callable(getattr(module, f, None)) for f in functions):
            raise ImportError(f"{full} lacks one of {functions}")
    except Exception as exc:  # noqa: BLE001  (a compile error, a link or import failure: the full build decides)
        try:
            with open(failed, "w") as f:
                f.write(f"{type(exc).__name__}: {exc}"[-20000:])
        except OSError:
            pass
        return None
    module.build_layout = layout + "+binding" + ("+pch" if obj["host_header"] else "")
    return module
