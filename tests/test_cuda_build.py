"""gpucourse.cuda_build and the gpucourse.cuda modules it gathers: the split layout (the device pass sees the kernels
alone, lines stay where the inline layout has them, a failure of the device pass alone falls back to the inline
layout), the host layout's launch rewrite, the precompiled torch/extension.h (used only when it was built for this
compiler, these flags and this torch) and the grader's binding object.

The builds themselves (load_inline, a CUDA torch) run on the GPU: benchmarks/grading_throughput.py builds and runs
both layouts there and grades batches with each (benchmarks/results/h100-grading-throughput.json)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types

import pytest

from gpucourse import cuda_build

HERE = os.path.dirname(os.path.abspath(__file__))
_real_device_arch = cuda_build.device_arch  # before any test stubs it
needs_nvcc = pytest.mark.skipif(cuda_build.nvcc_path() is None, reason="nvcc is not installed on this machine")

KERNELS = r"""
__global__ void scale(const float* x, long long n, float* out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * x[i];
}
"""
BINDING = r"""
torch::Tensor scale_cuda(torch::Tensor x) {
    auto out = torch::empty_like(x);
    scale<<<1, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), x.numel(), out.data_ptr<float>());
    return out;
}
"""


def _submission(name: str) -> types.SimpleNamespace:
    ns: dict = {}
    with open(os.path.join(HERE, "submissions", name)) as f:
        exec(compile(f.read(), name, "exec"), ns)
    return types.SimpleNamespace(**{k: ns[k] for k in ("KERNELS", "BINDING", "CPP")})


def test_only_sources_whose_device_code_is_all_in_the_kernels_are_split():
    assert cuda_build.splittable(KERNELS, BINDING)
    for name in ("block_sum/right_atomic_per_block.py", "sum_many/right_block_stride.py"):
        sub = _submission(name)
        assert cuda_build.splittable(sub.KERNELS, sub.BINDING), name
    # a kernel template is instantiated where the binding launches it: the device pass must see the binding
    assert not cuda_build.splittable("template <int B> __global__ void k(float* o) {}",
                                     "void f() { k<4><<<1, 1>>>(0); }")
    for device_code in ("__global__ void k2() {}", "__device__ int g;", "__constant__ float c[4];"):
        assert not cuda_build.splittable(KERNELS, BINDING + device_code)


def _inline_lines(kernels: str, binding: str) -> list:
    """The .cu file of the inline layout as load_inline writes it (its three implicit headers first)."""
    return ("#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n" +
            cuda_build.cuda_source(kernels, binding, False)).split("\n")


def _line_of(text_lines: list, needle: str) -> int:
    """The line number the compiler gives the line holding ``needle``, following #line directives."""
    line, out = 1, None
    for raw in text_lines:
        m = re.match(r"#line (\d+)", raw)
        if m:
            line = int(m.group(1))
            continue
        if needle in raw and out is None:
            out = line
        line += 1
    return out


def test_the_split_file_keeps_every_kernel_and_binding_line_where_the_inline_layout_has_it():
    sub = _submission("block_sum/right_atomic_per_block.py")
    split = cuda_build.cuda_source(sub.KERNELS, sub.BINDING, True, "/b/cuda.cu").split("\n")
    inline = _inline_lines(sub.KERNELS, sub.BINDING)
    for needle in ("__global__ void tree_sum", "atomicAdd(out, s[0])", "torch::Tensor sum_cuda", "return out;"):
        assert _line_of(split, needle) == _line_of(inline, needle), needle
    text = "\n".join(split)
    # torch's headers and the binding are host code only; the kernels are in both passes
    head, kernels_and_binding = text.split("#line 8 GPUCOURSE_CUDA_FILE\n")
    assert "#include <torch/types.h>" in head and "__global__" not in head
    binding_part = kernels_and_binding.split("#ifndef __CUDA_ARCH__\n", 1)[1]
    assert "torch::Tensor sum_cuda" in binding_part and "__global__" not in binding_part


@needs_nvcc
def test_the_device_pass_of_a_split_file_needs_no_torch_header_and_names_lines_as_the_inline_layout(tmp_path):
    """nvcc's device pass alone (-cubin), with no torch include path at all: the split file compiles; a kernel that
    leans on a torch type fails there, named plain cuda.cu, at the line the inline layout gives it."""
    nvcc = cuda_build.nvcc_path()
    path = tmp_path / "cuda.cu"
    path.write_text(cuda_build.cuda_source(KERNELS, BINDING, True, str(path)))
    proc = subprocess.run([nvcc, "-cubin", "-arch=sm_90", str(path), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    leaning = KERNELS.replace("2.0f * x[i]", "(float)c10::Half(x[i])")
    path.write_text(cuda_build.cuda_source(leaning, BINDING, True, str(path)))
    proc = subprocess.run([nvcc, "-cubin", "-arch=sm_90", str(path), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True)
    assert proc.returncode != 0
    line = _line_of(_inline_lines(leaning, BINDING), "c10::Half")
    assert re.search(rf"(^|\s)cuda\.cu\({line}\): error", proc.stdout + proc.stderr, re.M), proc.stdout + proc.stderr
    assert cuda_build._device_pass_failed(proc.stdout + proc.stderr)


def test_a_failure_is_blamed_on_the_device_pass_only_when_its_diagnostic_names_plain_cuda_cu():
    assert cuda_build._device_pass_failed('cuda.cu(18): error: name followed by "::" must be a class')
    assert cuda_build._device_pass_failed('FAILED: cuda.cuda.o\n  cuda.cu(9): catastrophic error: cannot open')
    # the host pass (torch's headers, as in the inline layout) names the file by its path; main.cpp is g++'s
    assert not cuda_build._device_pass_failed('/cache/b_1/cuda.cu(18): error: identifier "total" is undefined')
    assert not cuda_build._device_pass_failed("/cache/b_1/main.cpp:3:1: error: 'Tensr' does not name a type")


@pytest.fixture
def gpu_build(monkeypatch, tmp_path):
    """build() as on a GPU, with _load recorded instead of compiling."""
    cuda_build.forget_loaded()
    monkeypatch.setattr(cuda_build.device, "on_gpu", lambda: True)
    monkeypatch.setattr(cuda_build, "require_tools", lambda **kw: None)
    monkeypatch.setattr(cuda_build, "device_arch", lambda: "sm_90")
    monkeypatch.setattr(cuda_build, "cache_dir", lambda: str(tmp_path))
    monkeypatch.delenv(cuda_build.BUILD_ENV, raising=False)
    calls = []
    yield calls
    cuda_build.forget_loaded()


def _failing_split(calls, output):
    def load(name, key, kernels, binding, cpp, functions, flags, verbose, layout):
        calls.append(layout)
        if layout == "host":
            raise ImportError("undefined symbol: a kernel the host layout could not link")
        if layout == "split":
            err = cuda_build.CudaCompileError("building failed")
            err.raw = output
            raise err
        return types.SimpleNamespace()
    return load


def test_only_a_device_pass_failure_is_built_again_the_inline_way(gpu_build, monkeypatch):
    monkeypatch.setattr(cuda_build, "_load", _failing_split(gpu_build, "cuda.cu(9): error: c10 is undefined"))
    cuda_build.build("k", KERNELS, BINDING, "torch::Tensor scale_cuda(torch::Tensor x);", ["scale_cuda"])
    assert gpu_build == ["host", "split", "inline"]
    gpu_build.clear()
    cuda_build.forget_loaded()
    monkeypatch.setattr(cuda_build, "_load", _failing_split(gpu_build, '/c/k/cuda.cu(9): error: "total" undefined'))
    with pytest.raises(cuda_build.CudaCompileError):  # the host pass saw what the inline layout sees: no rebuild
        cuda_build.build("k", KERNELS, BINDING, "torch::Tensor scale_cuda(torch::Tensor x);", ["scale_cuda"])
    assert gpu_build == ["host", "split"]


def test_the_inline_layout_is_selected_by_the_environment(gpu_build, monkeypatch):
    def load(name, key, kernels, binding, cpp, functions, flags, verbose, layout):
        gpu_build.append((layout, key))
        return types.SimpleNamespace()

    monkeypatch.setattr(cuda_build, "_load", load)
    args = ("k", KERNELS, BINDING, "torch::Tensor scale_cuda(torch::Tensor x);", ["scale_cuda"])
    for layout in ("split", "inline", ""):
        monkeypatch.setenv(cuda_build.BUILD_ENV, layout)
        cuda_build.forget_loaded()
        cuda_build.build(*args)
    layouts = [layout for layout, _ in gpu_build]
    assert layouts == ["split", "inline", "host"] and len({key for _, key in gpu_build}) == 3  # a folder each
    monkeypatch.setenv(cuda_build.BUILD_ENV, "fast")
    with pytest.raises(ValueError, match="host, split, inline"):
        cuda_build.build_layout()


def _fake_recipe(monkeypatch):
    recipe = {"cxx": ["c++"], "flags": ["-DTORCH_API_INCLUDE_EXTENSION_H", "-fPIC", "-O2"], "compiler": ["c++ 12"],
              "torch": "2.x", "torch_path": "/t"}
    monkeypatch.setitem(cuda_build._recipe_cache, "recipe", recipe)
    return recipe


def test_the_precompiled_header_is_used_only_when_built_for_this_recipe(monkeypatch, tmp_path):
    recipe = _fake_recipe(monkeypatch)
    monkeypatch.setattr(cuda_build, "cache_dir", lambda: str(tmp_path / "own"))
    monkeypatch.delenv(cuda_build.SHARED_ENV, raising=False)
    assert cuda_build.shared_header() is None
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / (cuda_build.PCH_HEADER + ".gch")).write_bytes(b"gch")
    (shared / "recipe.json").write_text(json.dumps(dict(recipe, torch="another")))
    monkeypatch.setenv(cuda_build.SHARED_ENV, str(shared))
    assert cuda_build.shared_header() is None  # built for another torch: gcc would take it, so it is refused here
    (shared / "recipe.json").write_text(json.dumps(recipe))
    assert cuda_build.shared_header() == str(shared / cuda_build.PCH_HEADER)
    (shared / (cuda_build.PCH_HEADER + ".gch")).unlink()
    assert cuda_build.shared_header() is None


def test_the_recipe_is_torch_s_own_main_cpp_command_without_the_extension_name(monkeypatch):
    import torch.utils.cpp_extension as ext

    def write(path, name, sources, extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths, with_cuda,
              is_standalone):  # an older signature (no sycl): only the parameters it has are passed
        with open(path, "w") as f:
            f.write(f"cxx = c++\ncflags = -DTORCH_EXTENSION_NAME={name} -DTORCH_API_INCLUDE_EXTENSION_H "
                    f"-isystem '/a b/include' -fPIC -std=c++20 {' '.join(extra_cflags)}\npost_cflags = \n")

    monkeypatch.setattr(ext, "_write_ninja_file_to_build_library", write, raising=False)
    monkeypatch.delitem(cuda_build._recipe_cache, "recipe", raising=False)
    try:
        recipe = cuda_build.pch_recipe()
    finally:
        cuda_build._recipe_cache.clear()
    assert recipe["cxx"] == ["c++"]
    assert recipe["flags"] == ["-DTORCH_API_INCLUDE_EXTENSION_H", "-isystem", "/a b/include", "-fPIC", "-std=c++20",
                               *cuda_build.MAIN_CFLAGS]


def test_workers_get_the_prepared_folder_read_only_and_nothing_before(monkeypatch, tmp_path):
    from gpucourse.grading import sandbox

    monkeypatch.setattr(cuda_build, "_prepared", {})
    monkeypatch.delenv(cuda_build.BUILD_ENV, raising=False)
    assert cuda_build.worker_env() == {} and cuda_build.worker_binds() == []
    folder = str(tmp_path / "pch_x")
    monkeypatch.setitem(cuda_build._prepared, "folder", folder)
    monkeypatch.setenv(cuda_build.BUILD_ENV, "inline")
    assert cuda_build.worker_env() == {cuda_build.SHARED_ENV: folder, cuda_build.BUILD_ENV: "inline"}
    iso = sandbox.Isolation("bubblewrap", "", "/usr/bin/bwrap", True, True)
    (tmp_path / "w").mkdir()
    cmd = sandbox.command(iso, ["python"], str(tmp_path / "w"), None, False)
    i = cmd.index(folder)
    assert cmd[i - 1:i + 2] == ["--ro-bind", folder, folder]
    assert ["--bind", folder] not in [cmd[j:j + 2] for j in range(len(cmd) - 1)]


def test_a_prebuild_without_a_gpu_compiles_under_the_key_the_gpu_worker_then_loads(gpu_build, monkeypatch):
    """The grader's first worker sees no GPU (GPUCOURSE_CUDA_PREBUILD=1, the GPU's arch in GPUCOURSE_CUDA_ARCH): its
    build() must compile into the very folder (same key) that the graded worker on the GPU looks in, then stop with
    NeedsGPU as CPU mode does."""
    def load(name, key, kernels, binding, cpp, functions, flags, verbose, layout):
        gpu_build.append(key)
        return types.SimpleNamespace()

    monkeypatch.setattr(cuda_build, "_load", load)
    monkeypatch.setattr(cuda_build, "device_arch", _real_device_arch)  # the fixture's stub: the env-reading one
    monkeypatch.setenv(cuda_build.ARCH_ENV, "sm_90a")
    args = ("k", KERNELS, BINDING, "torch::Tensor scale_cuda(torch::Tensor x);", ["scale_cuda"])
    cuda_build.build(*args)  # the graded worker (on_gpu stubbed True by the fixture)
    cuda_build.forget_loaded()
    monkeypatch.setattr(cuda_build.device, "on_gpu", lambda: False)
    monkeypatch.setenv(cuda_build.PREBUILD_ENV, "1")
    monkeypatch.setattr(cuda_build, "compile_check", lambda *a, **k: cuda_build.CompileReport("sm_90a", {}, "", 0.0))
    with pytest.raises(cuda_build.NeedsGPU):
        cuda_build.build(*args)
    assert len(gpu_build) == 2 and gpu_build[0] == gpu_build[1], gpu_build
    monkeypatch.delenv(cuda_build.PREBUILD_ENV)  # plain CPU mode: the nvcc check only, nothing built
    cuda_build.forget_loaded()
    with pytest.raises(cuda_build.NeedsGPU):
        cuda_build.build(*args)
    assert len(gpu_build) == 2


def test_the_arch_from_the_environment_is_taken_only_when_it_is_one(monkeypatch):
    monkeypatch.setattr(cuda_build.device, "sm_number", lambda: None)
    monkeypatch.setenv(cuda_build.ARCH_ENV, "sm_90a")
    assert _real_device_arch() == "sm_90a"
    monkeypatch.setenv(cuda_build.ARCH_ENV, "sm_90; rm -rf /")
    assert _real_device_arch() == cuda_build.DEFAULT_ARCH


# ---------------------------------------------------------------------------------------------------------------------
# The host layout: the binding in main.cpp, its launches rewritten; the .cu file the kernels alone.


def test_launches_are_rewritten_with_the_defaults_of_the_triple_chevron_and_nested_brackets_kept():
    kernels = "__global__ void __launch_bounds__(256) k(const float* __restrict__ x, int n) {}\n" \
              "__global__ void other(float* y) {}\n"
    binding = ("void f(float* x, int n, cudaStream_t s) {\n"
               "  k<<<dim3((n + 255) / 256, 1), 256>>>(x, std::min(n, 7));\n"
               "  other <<< 1, dim3(32, 4), 128 >>> (x);\n"
               "  k<<<1, 1, 0, s>>>(x, n);\n}\n")
    main = cuda_build.host_binding(kernels, binding)
    assert "void k(const float* __restrict__ x, int n);" in main and "void other(float* y);" in main
    assert ("::gpucourse_host::launch(k, dim3((n + 255) / 256, 1), 256, (0), ::gpucourse_host::stream(0), x, "
            "std::min(n, 7));") in main
    assert "::gpucourse_host::launch(other, 1, dim3(32, 4), (128), ::gpucourse_host::stream(0), x);" in main
    assert "::gpucourse_host::launch(k, 1, 1, (0), ::gpucourse_host::stream(s), x, n);" in main
    assert "<<<" not in main.split("namespace gpucourse_host")[-1]


@pytest.mark.parametrize("kernels, binding, why", [
    ("template <int B> __global__ void k(float* x) {}", "k<4><<<1, 1>>>(x);", "a template"),
    ("namespace a { __global__ void k(float* x) {} }", "a::k<<<1, 1>>>(x);", "a namespace"),
    ("static __global__ void k(float* x) {}", "k<<<1, 1>>>(x);", "a static kernel: no symbol to link"),
    ('extern "C" __global__ void k(float* x) {}', "k<<<1, 1>>>(x);", "another linkage"),
    ("#ifdef FAST\n#define B 4\n#endif\n__global__ void k(float* x) {}", "k<<<1, 1>>>(x);", "a conditional"),
    ("__global__ void k(float* x) {}", "helper<<<1, 1>>>(x);", "a launch of no kernel of these"),
    ("__global__ void k(float* x) {}", "k<<<1>>>(x);", "a launch with one config value"),
    ("__global__ void k(float* x) {}", "void f() { cudaMemset(0, 0, 0); }", "no launch at all"),
])
def test_sources_the_host_layout_cannot_carry_keep_the_split_layout(kernels, binding, why):
    assert cuda_build.host_binding(kernels, binding) is None, why
    assert cuda_build.layouts(kernels, binding)[0] != "host", why


@needs_nvcc
@pytest.mark.skipif(not os.path.exists("/usr/local/cuda/lib64/libcudart.so") or cuda_build.tool("g++") is None,
                    reason="needs CUDA's runtime library and g++")
def test_a_host_layout_binding_compiled_by_gcc_links_to_the_kernel_nvcc_compiled(tmp_path):
    """Without torch or a GPU: the rewritten binding, compiled by g++ alone, links against the kernel's host symbol
    in nvcc's object (nvcc gives every non-static kernel an ordinary external function of its name and parameters,
    the one cudaLaunchKernel identifies it by), and the launch reaches the runtime (no GPU here: it reports one)."""
    sub = _submission("block_sum/right_atomic_per_block.py")
    kernels = sub.KERNELS.replace("tree_sum(const float* x",
                                  "__launch_bounds__(256) tree_sum(const float* __restrict__ x")
    binding = ('extern "C" int run(const float* x, long long n, float* out) {\n'
               '    tree_sum<<<dim3((n + 255) / 256), 256, 0, 0>>>(x, n, out);\n'
               '    return (int)cudaGetLastError();\n}\n')
    (tmp_path / "cuda.cu").write_text(cuda_build.kernels_source(kernels, "cuda.cu"))
    (tmp_path / "main.cpp").write_text(cuda_build.host_binding(kernels, binding) +
                                       "\nint main() { return run(nullptr, 10, nullptr) != 0 ? 0 : 1; }\n")
    steps = [[cuda_build.nvcc_path(), "-c", "-arch=sm_90", "-Xcompiler", "-fPIC", "cuda.cu", "-o", "cuda.o"],
             ["g++", "-c", "-fPIC", "-I/usr/local/cuda/include", "main.cpp", "-o", "main.o"],
             ["g++", "main.o", "cuda.o", "-L/usr/local/cuda/lib64", "-lcudart", "-o", "t"]]
    for cmd in steps:
        proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
    env = dict(os.environ, LD_LIBRARY_PATH="/usr/local/cuda/lib64", CUDA_VISIBLE_DEVICES="")
    assert subprocess.run([str(tmp_path / "t")], env=env, timeout=60).returncode == 0  # the runtime was reached


@pytest.mark.skipif(not os.path.exists("/usr/local/cuda/include/cuda_runtime.h") or cuda_build.tool("g++") is None,
                    reason="needs CUDA's headers and g++")
def test_a_rewritten_launch_hands_the_runtime_the_kernel_its_configuration_and_converted_arguments(tmp_path):
    """The host layout's launcher compiled by g++, with cudaLaunchKernel replaced by one that records what it is given
    (and the kernel's host symbol by an empty function): the kernel's own symbol, the grid, block and shared memory,
    and each argument converted to its parameter's type (an int passed where the kernel takes a long long)."""
    import ctypes

    binding = ('extern "C" void run(const float* x, int n, float* out) {\n'
               '    scale<<<dim3((n + 255) / 256), 256, 64, 0>>>(x, n, out);\n}\n')
    (tmp_path / "main.cpp").write_text(cuda_build.host_binding(KERNELS, binding))
    (tmp_path / "fake.cpp").write_text(
        "#include <cuda_runtime.h>\n"
        "void scale(const float* x, long long n, float* out) {}\n"
        'extern "C" { int launched = 0, same_kernel = 0; unsigned grid_x = 0, block_x = 0; size_t smem = 0;\n'
        "             long long n_arg = 0; const void* x_arg = nullptr; }\n"
        'extern "C" cudaError_t cudaLaunchKernel(const void* f, dim3 g, dim3 b, void** args, size_t s,\n'
        "                                        cudaStream_t) {\n"
        "  ++launched; grid_x = g.x; block_x = b.x; smem = s;\n"
        "  same_kernel = f == reinterpret_cast<const void*>(&scale);\n"
        "  x_arg = *static_cast<const float**>(args[0]); n_arg = *static_cast<long long*>(args[1]);\n"
        "  return cudaSuccess;\n}\n")
    proc = subprocess.run(["g++", "-shared", "-fPIC", "-I/usr/local/cuda/include", "main.cpp", "fake.cpp", "-o",
                           "k.so"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lib = ctypes.CDLL(str(tmp_path / "k.so"))
    lib.run.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    lib.run(0x1000, 1000, None)
    got = {name: kind.in_dll(lib, name).value for name, kind in (
        ("launched", ctypes.c_int), ("same_kernel", ctypes.c_int), ("grid_x", ctypes.c_uint),
        ("block_x", ctypes.c_uint), ("smem", ctypes.c_size_t), ("n_arg", ctypes.c_longlong),
        ("x_arg", ctypes.c_void_p))}
    assert got == {"launched": 1, "same_kernel": 1, "grid_x": 4, "block_x": 256, "smem": 64, "n_arg": 1000,
                   "x_arg": 0x1000}, got


# ---------------------------------------------------------------------------------------------------------------------
# The binding object: the pybind11 module of an exercise, compiled once by the grader and linked by every build of
# its declarations instead of compiling main.cpp.

CPP = "torch::Tensor scale_cuda(torch::Tensor x);"


def test_the_binding_key_changes_with_each_input_that_changes_the_code(monkeypatch):
    recipe = _fake_recipe(monkeypatch)
    base = cuda_build.binding_key(CPP, ["scale_cuda"], recipe)
    assert cuda_build.binding_key(CPP, ("scale_cuda",), dict(recipe)) == base  # the same inputs, the same key
    changed = {
        "declarations": cuda_build.binding_key(CPP.replace("x)", "y)"), ["scale_cuda"], recipe),
        "names": cuda_build.binding_key(CPP + "\nint g();", ["scale_cuda", "g"], recipe),
        "name order": cuda_build.binding_key(CPP + "\nint g();", ["g", "scale_cuda"], recipe),
        "torch": cuda_build.binding_key(CPP, ["scale_cuda"], dict(recipe, torch="2.y")),
        "compiler": cuda_build.binding_key(CPP, ["scale_cuda"], dict(recipe, compiler=["c++ 13"])),
        "flags": cuda_build.binding_key(CPP, ["scale_cuda"], dict(recipe, flags=recipe["flags"] + ["-O3"])),
    }
    assert base not in changed.values() and len(set(changed.values())) == len(changed), changed
    with pytest.raises(ValueError, match="identifiers"):
        cuda_build.binding_key(CPP, ["scale_cuda); system(\"x\""], recipe)
    with pytest.raises(ValueError, match="identifiers"):
        cuda_build.binding_key(CPP, [], recipe)
    with pytest.raises(TypeError, match="one string"):
        cuda_build.binding_key([CPP], ["scale_cuda"], recipe)


def test_the_module_source_is_load_inline_s_and_the_stub_calls_the_object_s_init():
    src = cuda_build.module_source(CPP, ["scale_cuda"], "gpucourse_binding_k1")
    assert src.startswith("#include <torch/extension.h>\n" + CPP)
    assert "PYBIND11_MODULE(gpucourse_binding_k1, m)" in src
    assert 'm.def("scale_cuda", torch::wrap_pybind_function(scale_cuda), "scale_cuda");' in src
    stub = cuda_build.init_stub("k1")
    assert 'extern "C" void* PyInit_gpucourse_binding_k1(void);' in stub
    assert "GPUCOURSE_PYINIT(TORCH_EXTENSION_NAME)(void)" in stub and "return PyInit_gpucourse_binding_k1();" in stub


def test_the_bound_files_keep_the_declarations_after_the_binding_and_the_stub_out_of_the_device_pass():
    files = cuda_build.bound_sources("host", KERNELS, BINDING, CPP, "k1", "/b/cuda.cu")
    assert set(files) == {"host.cpp", "cuda.cu"}
    host = files["host.cpp"]
    assert "torch/extension.h" not in host and host.startswith(cuda_build.BINDING_HEADERS)
    # load_inline's main.cpp order: a definition that disagrees with its declaration fails to compile here too
    assert host.index("torch::Tensor scale_cuda(torch::Tensor x) {") < host.index(CPP) < host.index("PyInit_")
    assert files["cuda.cu"] == cuda_build.kernels_source(KERNELS, "/b/cuda.cu")
    split = cuda_build.bound_sources("split", KERNELS, BINDING, CPP, "k1", "/b/cuda.cu")
    assert list(split) == ["cuda.cu"]
    tail = split["cuda.cu"].rsplit("#ifndef __CUDA_ARCH__\n", 1)[1]
    assert "PyInit_gpucourse_binding_k1" in tail and tail.rstrip().endswith("#endif")
    with pytest.raises(ValueError, match="inline"):
        cuda_build.bound_sources("inline", KERNELS, BINDING, CPP, "k1", "/b/cuda.cu")


def _binding_folder(root, recipe, cpp=CPP, functions=("scale_cuda",), obj=b"\x7fELF module", host_pch=None):
    """A binding folder as prepare_binding leaves it (without compiling): binding.json and module.o."""
    key = cuda_build.binding_key(cpp, functions, recipe)
    folder = root / f"binding_{key}"
    folder.mkdir(parents=True)
    (folder / cuda_build.BINDING_OBJECT).write_bytes(obj)
    (folder / "binding.json").write_text(json.dumps({
        "key": key, "cpp": cpp, "functions": list(functions), "recipe": recipe, "host_pch": host_pch,
        "object_sha256": cuda_build._sha256(str(folder / cuda_build.BINDING_OBJECT))}))
    return folder


@pytest.fixture
def fake_ext(gpu_build, monkeypatch):
    """build() as on a GPU, with torch's load (files) and load_inline (main.cpp) recorded instead of compiling; the
    fixture's list gets ("load", kwargs) or ("load_inline", kwargs); ``fail["load"]`` makes load raise that."""
    import torch.utils.cpp_extension as ext

    fail = {}

    def load(**kw):
        gpu_build.append(("load", kw))
        if "load" in fail:
            raise fail["load"]
        return types.SimpleNamespace(scale_cuda=lambda x: x)

    def load_inline(**kw):
        gpu_build.append(("load_inline", kw))
        return types.SimpleNamespace(scale_cuda=lambda x: x)

    monkeypatch.setattr(ext, "load", load)
    monkeypatch.setattr(ext, "load_inline", load_inline)
    monkeypatch.delenv(cuda_build.BINDING_ENV, raising=False)
    monkeypatch.delenv(cuda_build.SHARED_ENV, raising=False)
    monkeypatch.setattr(cuda_build, "_prepared", {})
    return types.SimpleNamespace(calls=gpu_build, fail=fail)


def _build_scale(cpp=CPP):
    cuda_build.forget_loaded()
    return cuda_build.build("k", KERNELS, BINDING, cpp, ["scale_cuda"])


def test_a_build_links_the_binding_object_only_when_it_is_valid_for_exactly_these_declarations(fake_ext, monkeypatch,
                                                                                                 tmp_path):
    recipe = _fake_recipe(monkeypatch)
    module = _build_scale()  # no object prepared: main.cpp as before
    assert [c for c, _ in fake_ext.calls] == ["load_inline"] and module.build_layout == "host"
    folder = _binding_folder(tmp_path / "shared", recipe)
    monkeypatch.setenv(cuda_build.BINDING_ENV, str(folder))
    fake_ext.calls.clear()
    module = _build_scale()
    (call, kw), = fake_ext.calls
    assert call == "load" and kw["extra_ldflags"] == [str(folder / cuda_build.BINDING_OBJECT)]
    assert [os.path.basename(s) for s in kw["sources"]] == ["host.cpp", "cuda.cu"]
    assert module.build_layout == "host+binding"  # no precompiled torch/types.h recorded: host.cpp parses it
    host_cpp = open(kw["sources"][0]).read()
    assert f"PyInit_gpucourse_binding_{cuda_build.binding_key(CPP, ['scale_cuda'], recipe)}" in host_cpp

    # the submission declares something else (another parameter): that object is not its module
    fake_ext.calls.clear()
    _build_scale(cpp=CPP.replace("x);", "x, double s);"))
    assert [c for c, _ in fake_ext.calls] == ["load_inline"]
    # the object changed after it was recorded
    fake_ext.calls.clear()
    (folder / cuda_build.BINDING_OBJECT).chmod(0o644)
    (folder / cuda_build.BINDING_OBJECT).write_bytes(b"\x7fELF another module")
    _build_scale()
    assert [c for c, _ in fake_ext.calls] == ["load_inline"]


@pytest.mark.parametrize("tamper", ["other declarations recorded", "other torch recorded", "folder of another key",
                                    "no record"])
def test_a_mismatched_or_tampered_binding_folder_is_ignored(fake_ext, monkeypatch, tmp_path, tamper):
    recipe = _fake_recipe(monkeypatch)
    folder = _binding_folder(tmp_path / "shared", recipe)
    record = json.loads((folder / "binding.json").read_text())
    if tamper == "other declarations recorded":
        (folder / "binding.json").write_text(json.dumps(dict(record, cpp=CPP + "\nint g();")))
    elif tamper == "other torch recorded":
        (folder / "binding.json").write_text(json.dumps(dict(record, recipe=dict(recipe, torch="2.y"))))
    elif tamper == "folder of another key":
        folder = folder.rename(tmp_path / "shared" / "binding_0123456789abcdef")
    else:
        (folder / "binding.json").unlink()
    monkeypatch.setenv(cuda_build.BINDING_ENV, str(folder))
    assert cuda_build.binding_object(CPP, ["scale_cuda"]) is None
    _build_scale()
    assert [c for c, _ in fake_ext.calls] == ["load_inline"]


def test_a_bound_build_that_fails_falls_back_to_main_cpp_and_is_not_tried_again_in_its_folder(fake_ext, monkeypatch,
                                                                                              tmp_path):
    recipe = _fake_recipe(monkeypatch)
    folder = _binding_folder(tmp_path / "shared", recipe)
    monkeypatch.setenv(cuda_build.BINDING_ENV, str(folder))
    fake_ext.fail["load"] = ImportError("undefined symbol: _Z10scale_cudaN2at6TensorE")
    module = _build_scale()
    assert [c for c, _ in fake_ext.calls] == ["load", "load_inline"] and module.build_layout == "host"
    bound_dir = os.path.dirname(fake_ext.calls[0][1]["sources"][0])
    assert "undefined symbol" in open(os.path.join(bound_dir, cuda_build.BOUND_FAILED)).read()
    fake_ext.calls.clear()
    _build_scale()  # the graded worker after a prebuild that failed there: straight to main.cpp
    assert [c for c, _ in fake_ext.calls] == ["load_inline"]


def test_a_split_build_links_the_object_with_the_cu_file_alone(fake_ext, monkeypatch, tmp_path):
    recipe = _fake_recipe(monkeypatch)
    folder = _binding_folder(tmp_path / "shared", recipe)
    monkeypatch.setenv(cuda_build.BINDING_ENV, str(folder))
    monkeypatch.setenv(cuda_build.BUILD_ENV, "split")
    module = _build_scale()
    (call, kw), = fake_ext.calls
    assert call == "load" and [os.path.basename(s) for s in kw["sources"]] == ["cuda.cu"]
    assert module.build_layout == "split+binding"


def test_the_binding_object_is_never_prepared_without_a_recipe_and_workers_see_it_read_only(monkeypatch, tmp_path):
    from gpucourse.grading import sandbox

    monkeypatch.setattr(cuda_build, "_prepared", {"binding": "/stale/binding_0"})
    monkeypatch.setitem(cuda_build._recipe_cache, "recipe", None)
    assert cuda_build.prepare_binding(CPP, ["scale_cuda"]) is None
    assert cuda_build.worker_env().get(cuda_build.BINDING_ENV) is None  # the stale folder was forgotten
    with pytest.raises(ValueError):
        cuda_build.prepare_binding(CPP, ["not a name"])
    monkeypatch.setattr(cuda_build, "_prepared", {"binding": str(tmp_path / "binding_1"),
                                                  "host_pch": str(tmp_path / "pch_2")})
    assert cuda_build.worker_env()[cuda_build.BINDING_ENV] == str(tmp_path / "binding_1")
    (tmp_path / "w").mkdir()
    cmd = sandbox.command(sandbox.Isolation("bubblewrap", "", "/usr/bin/bwrap", True, True), ["python"],
                          str(tmp_path / "w"), None, False)
    for folder in (str(tmp_path / "binding_1"), str(tmp_path / "pch_2")):
        i = cmd.index(folder)
        assert cmd[i - 1:i + 2] == ["--ro-bind", folder, folder]


@pytest.mark.slow
@needs_nvcc
@pytest.mark.skipif(not os.path.exists("/usr/local/cuda/lib64/libcudart.so") or cuda_build.tool("g++") is None,
                    reason="needs CUDA's runtime library and g++")
def test_a_prepared_binding_object_links_with_a_host_and_kernel_object_into_a_module_python_imports(monkeypatch,
                                                                                                    tmp_path):
    """Without a GPU or a CUDA torch (the recipe a CUDA torch would use, cuda_build.compile_only_recipe): the grader's
    binding object, the submission's host.cpp (g++) and cuda.cu (nvcc) link into one .so; Python imports it by the
    build's own name (the stub's PyInit_<name> calls the object's init) and the bound function reaches the CUDA
    runtime (no GPU here: it reports an error code). The precompiled torch/types.h is skipped (it changes no code,
    and takes half a minute)."""
    import torch

    monkeypatch.setenv("GPUCOURSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(cuda_build.BINDING_ENV, raising=False)
    monkeypatch.setattr(cuda_build, "_prepared", {})
    recipe = cuda_build.compile_only_recipe(str(tmp_path / "include"))
    if recipe is None:
        pytest.skip("torch's extension recipe is not available here")
    monkeypatch.setitem(cuda_build._recipe_cache, "recipe", recipe)
    monkeypatch.setattr(cuda_build, "_build_pch", lambda *a, **k: None)
    binding = BINDING.replace("c10::cuda::getCurrentCUDAStream()", "0").replace(
        "return out;", "return torch::full({1}, (int64_t)cudaGetLastError(), torch::kInt64);")
    folder = cuda_build.prepare_binding(CPP, ["scale_cuda"])
    assert folder and cuda_build.worker_binds() == [folder]
    assert not os.access(os.path.join(folder, cuda_build.BINDING_OBJECT), os.W_OK) or os.geteuid() == 0
    assert oct(os.stat(os.path.join(folder, cuda_build.BINDING_OBJECT)).st_mode & 0o777) == "0o444"
    obj = cuda_build.binding_object(CPP, ["scale_cuda"])
    assert obj["folder"] == folder and obj["host_header"] is None
    name = "k_0123abcd"
    files = cuda_build.bound_sources("host", KERNELS, binding, CPP, obj["key"], "cuda.cu")
    for fname, text in files.items():
        (tmp_path / fname).write_text(text)
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    steps = [[cuda_build.nvcc_path(), "-c", "-arch=sm_90", "-Xcompiler", "-fPIC", "cuda.cu", "-o", "cuda.o"],
             [*recipe["cxx"], "-c", "host.cpp", "-o", "host.o", *recipe["flags"], f"-DTORCH_EXTENSION_NAME={name}"],
             [*recipe["cxx"], "-shared", "host.o", "cuda.o", obj["object"], "-o", f"{name}.so", f"-L{lib}", "-lc10",
              "-ltorch_cpu", "-ltorch", "-ltorch_python", "-L/usr/local/cuda/lib64", "-lcudart"]]
    for cmd in steps:
        proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    code = ("import importlib.machinery, importlib.util, sys, torch\n"
            "loader = importlib.machinery.ExtensionFileLoader(sys.argv[1], sys.argv[2])\n"
            "spec = importlib.util.spec_from_file_location(sys.argv[1], sys.argv[2], loader=loader)\n"
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            "print(sorted(k for k in vars(m) if not k.startswith('_')), int(m.scale_cuda(torch.ones(3))[0]))\n")
    env = dict(os.environ, LD_LIBRARY_PATH="/usr/local/cuda/lib64", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-c", code, name, str(tmp_path / f"{name}.so")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names, status = proc.stdout.split("] ")
    assert names == "['scale_cuda'" and int(status) != 0  # the launch reached the runtime, which found no GPU


def test_the_host_layout_key_covers_its_generated_launcher(monkeypatch):
    monkeypatch.setattr(cuda_build, "device_arch", lambda: "sm_90")
    args = (KERNELS, BINDING, CPP, ["scale_cuda"], ())
    before = cuda_build._key(*args, "host"), cuda_build._key(*args, "split")
    monkeypatch.setattr(cuda_build, "HOST_PROLOGUE", cuda_build.HOST_PROLOGUE + "\n// changed\n")
    assert cuda_build._key(*args, "host") != before[0] and cuda_build._key(*args, "split") == before[1]


# ---------------------------------------------------------------------------------------------------------------------
# cuda_build gathers the gpucourse.cuda modules' names; setting one there sets it where it is defined.


def test_setting_a_gathered_name_sets_it_in_the_module_that_uses_it(monkeypatch):
    from gpucourse.cuda import inspection, tools

    assert all(hasattr(cuda_build, name) for name in cuda_build.__all__)
    real_nvcc_path, real_flags = tools.nvcc_path, tools.NVCC_FLAGS
    monkeypatch.setattr(cuda_build, "nvcc_path", lambda: None)  # as lesson 04's tests do
    monkeypatch.setattr(cuda_build, "NVCC_FLAGS", ("-O1",))  # as lab/explore_cuda_build_flags.py does
    assert tools.nvcc_path() is None and tools.NVCC_FLAGS == ("-O1",)
    with pytest.raises(cuda_build.ToolMissing, match="install the CUDA toolkit"):
        inspection.compile_check("__global__ void k() {}", cache=False)
    monkeypatch.undo()
    assert tools.nvcc_path is real_nvcc_path and tools.NVCC_FLAGS == real_flags == cuda_build.NVCC_FLAGS
    monkeypatch.setattr(cuda_build, "not_gathered", 1, raising=False)  # a new name stays on cuda_build alone
    assert not any(hasattr(part, "not_gathered") for part in cuda_build._PARTS)


_GPU_BUILDS = r"""
import json, sys, torch
from gpucourse import cuda_build
from gpucourse.solutions import load_solutions

ns = load_solutions("04_cuda_reduction")
cuda_build.prepare_shared()
out = {}
xs = [torch.rand(n, device="cuda") - 0.25 for n in (1, 1025, 300_001)]
for prefix, functions in (("BLOCK_SUM", ["block_sum_cuda"]), ("SUM_MANY", ["sum_many_cuda"])):
    cpp = ns[prefix + "_CPP"]
    r = out[prefix] = {"folder": cuda_build.prepare_binding(cpp, functions)}
    mod = cuda_build.build(prefix.lower() + "_bound", ns[prefix + "_KERNELS"], ns[prefix + "_BINDING"], cpp, functions)
    r["layout"] = mod.build_layout
    fn = getattr(mod, functions[0])
    got = torch.stack([fn(x) for x in xs]) if prefix == "BLOCK_SUM" else fn(xs)
    want = torch.stack([x.double().sum() for x in xs]).float()
    r["right"] = bool(torch.allclose(got, want, rtol=1e-5, atol=1e-4))
print(json.dumps(out))
"""


@pytest.mark.gpu
def test_on_a_gpu_lesson_04_s_builds_link_the_binding_object_and_sum_right(tmp_path):
    """The solution workbook's block_sum (host layout) and sum_many (split) built as the grader's workers build them,
    with prepare_binding's object, in a fresh process and cache: right answers."""
    env = dict(os.environ, GPUCOURSE_CACHE=str(tmp_path))
    env.pop(cuda_build.BINDING_ENV, None)
    proc = subprocess.run([sys.executable, "-c", _GPU_BUILDS], env=env, capture_output=True, text=True, timeout=900,
                          cwd=os.path.dirname(HERE))
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    bs, sm = r["BLOCK_SUM"], r["SUM_MANY"]
    assert bs["folder"] and sm["folder"] and bs["folder"] != sm["folder"]
    assert bs["layout"].startswith("host+binding") and sm["layout"].startswith("split+binding"), r
    assert bs["right"] and sm["right"], r
