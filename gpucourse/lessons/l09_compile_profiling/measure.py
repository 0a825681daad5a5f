"""What lesson 09's notebook measures, gathered in one namespace: a small training step under the profiler,
proton and Nsight Compute (:mod:`.profiling`), torch.compile's graphs and generated code (:mod:`.compiled`), the
compile modes (:mod:`.modes`), and where fusion stops (:mod:`.fusion_limits`)."""
from .profiling import (  # noqa: F401
    small_model, batches, train_step, profile_steps, top_table, profile_with_schedule, proton_tree, proton_tree_child,
    inclusive_ms, print_tree, NCU_METRICS, SM_CLOCK, DRAM_CLOCK, sm_clock_mhz, max_clocks_mhz, ncu_clock_lines, ncu,
    _ncu_csv)
from .compiled import (  # noqa: F401
    sin_chain, ln_scale_gelu, _KERNEL_DEF, _EXTERN, generated, kernel_source, gpu_ops, gpu_kernel_count,
    eager_op_count, cpu_vector_isa, with_a_graph_break, explain, fullgraph_error, _first_lines, count_compiles,
    quiet_inductor, parse_autotune, autotune_lines, inductor_log_lines)
from .modes import (  # noqa: F401
    low_dtype, fusion_examples, small_mlp, gpu_time_per_call, wall_us, MODES, MLP, compile_modes, break_even_calls,
    modes_lines)
from .fusion_limits import (  # noqa: F401
    epilogue_inputs, _is_copy, short_kernel, gpu_split, EPILOGUE_MODES, epilogue_timings, epilogue_lines, RMS_SHAPES,
    COPY, RMS_ORDER, copy_fn, rmsnorm_point, rmsnorm_lines, no_compile_threads, block_with_own_kernel,
    own_kernel_in_compile)
