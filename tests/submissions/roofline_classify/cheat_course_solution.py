"""Cheat (issue 17): the course's roofline module classifies the ops (the exercise's answer). While the learner's
function runs, the course's classify raises instead of answering: an error naming it."""
from gpucourse import roofline


def roofline_classify(ops, ceilings):
    c = roofline.Ceilings(gbps=ceilings["gbps"], tflops=ceilings["tensor_tflops"], source="mine",
                          fp32_tflops=ceilings["cuda_tflops"])
    out = {}
    for name, d in ops.items():
        op = roofline.from_dict(d, name=name)
        out[name] = (op.intensity, roofline.classify(op, c))
    return out
