"""The host layout's launch rewrite: the binding compiles in main.cpp with gcc, where ``<<<>>>`` does not exist.

Each ``kernel<<<grid, block, smem, stream>>>(args)`` of the binding becomes a call of a small launcher
(:data:`HOST_PROLOGUE`) that converts the arguments to the kernel's parameter types and calls ``cudaLaunchKernel``
with the kernel's host symbol (the ordinary function nvcc defines for every kernel, declared in main.cpp from the
kernels' own ``__global__`` lines). :func:`host_binding` returns None for sources it cannot carry; those build in
the split layout.
"""
from __future__ import annotations

import re

# What main.cpp needs to launch the kernels without nvcc: CUDA's runtime API and the vector/half types, the kernels'
# host-side symbols declared as plain functions (nvcc defines each kernel's host stub, an ordinary function of the
# kernel's name and parameters, in the .cu file's object), and a launch through cudaLaunchKernel that converts each
# argument to its parameter's type as a call would, as nvcc's <<<>>> does.
HOST_PROLOGUE = r"""
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>
#ifndef __grid_constant__
#define __grid_constant__
#endif
namespace gpucourse_host {
inline cudaStream_t stream(cudaStream_t s) { return s; }
inline cudaStream_t stream(int s) { return reinterpret_cast<cudaStream_t>(static_cast<intptr_t>(s)); }
template <typename K, typename T, std::size_t... I>
inline void launch_tuple(K kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t st, T& values,
                         std::index_sequence<I...>) {
  void* args[] = {const_cast<void*>(static_cast<const void*>(&std::get<I>(values)))..., nullptr};
  cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, args, smem, st);
}
template <typename... P, typename... A>
inline void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, A&&... a) {
  static_assert(sizeof...(P) == sizeof...(A), "a kernel launched with the wrong number of arguments");
  std::tuple<typename std::decay<P>::type...> values(std::forward<A>(a)...);
  launch_tuple(kernel, grid, block, smem, st, values, std::index_sequence_for<P...>{});
}
}  // namespace gpucourse_host
"""
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_NOT_HOSTABLE = re.compile(r"\bnamespace\b|\bstatic\b[^;{}]*__global__|__global__[^;{}(]*\bstatic\b|extern\s*\"C\"|"
                           r"\btemplate\b|#\s*if|\\\n")


def _matching(text: str, start: int) -> int | None:
    """Index of the ``)`` that closes the ``(`` at ``start`` (string and char literals skipped); None if none."""
    depth, i, n = 0, start, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def _split_top(text: str) -> list:
    """``text`` split at commas outside brackets."""
    parts, depth, cur = [], 0, ""
    for c in text:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    return parts + [cur]


def _rewrite_launches(binding: str, names) -> str | None:
    """Each ``kernel<<<grid, block[, smem[, stream]]>>>(args)`` of ``binding`` as a call of the launch helper;
    None when a launch is not of that shape or names no kernel of ``names``."""
    out, i = [], 0
    while True:
        j = binding.find("<<<", i)
        if j < 0:
            return "".join(out) + binding[i:]
        m = re.search(r"(\w+)\s*$", binding[i:j])
        k = binding.find(">>>", j + 3)
        if not m or m.group(1) not in names or k < 0:
            return None
        config = [c.strip() for c in _split_top(binding[j + 3:k])]
        p = k + 3
        while p < len(binding) and binding[p].isspace():
            p += 1
        q = _matching(binding, p) if binding[p:p + 1] == "(" else None
        if not 2 <= len(config) <= 4 or not all(config) or q is None:
            return None
        grid, block, smem, stream = (config + ["0", "0"])[:4]
        args = binding[p + 1:q].strip()
        out.append(binding[i:i + m.start(1)] + f"::gpucourse_host::launch({m.group(1)}, {grid}, {block}, ({smem}), "
                   f"::gpucourse_host::stream({stream}){', ' + args if args else ''})")
        i = q + 1


def host_binding(kernels: str, binding: str) -> str | None:
    """main.cpp's part for the host layout: the prologue, the kernels' ``#define`` lines, their host symbols
    declared, and ``binding`` with its launches rewritten; None where the kernels or the binding do not fit (a
    template, a namespace, a static or extern "C" kernel, a conditional block, a launch not of the plain shape)."""
    code = _COMMENTS.sub(" ", kernels)
    if _NOT_HOSTABLE.search(code) or "<<<" not in binding:
        return None
    defines = [line.strip() for line in code.splitlines() if line.strip().startswith("#define")]
    code = re.sub(r"__launch_bounds__\s*\([^()]*\)", " ", code)
    decls = {}
    for m in re.finditer(r"__global__\s+void\s+(\w+)\s*\(", code):
        close = _matching(code, m.end() - 1)
        if close is None:
            return None
        decls.setdefault(m.group(1), f"void {m.group(1)}({' '.join(code[m.end():close].split())});")
    launches = _rewrite_launches(binding, decls) if decls else None
    if launches is None:
        return None
    return HOST_PROLOGUE + "\n".join(defines + list(decls.values())) + "\n" + launches
