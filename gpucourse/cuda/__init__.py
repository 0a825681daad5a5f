"""The course's CUDA C++ builder, one job a module; ``gpucourse.cuda_build`` gathers their public names.

* ``tools``: nvcc and the CUDA tools, the cache folder, the arch to compile for, the errors;
* ``inspection``: what lesson 04 inspects: ``compile_check`` (ptxas's registers, shared memory, spills) and ``sass``;
* ``sources``: the three layouts (``host``, ``split``, ``inline``) and the .cu file each compiles;
* ``launch_rewrite``: the host layout's rewrite of ``kernel<<<...>>>(args)`` into a plain C++ launcher call;
* ``build``: ``build`` (load_inline with course defaults), the layout fallbacks, the grader's prebuild;
* ``cache``: what the grader prepares once for its workers: the precompiled torch headers and the binding object.

Modules reach each other's names through the module (``tools.nvcc_path()``), so a name set on ``cuda_build`` (a
test's monkeypatch) is the one every caller sees.
"""
