"""Wrong: a correct answer from torch alone (float32 matmul of the dequantized operands), no Triton kernel."""
import torch


def fp8_matmul(a, b, scale_a, scale_b):
    return ((a.float() * scale_a) @ (b.float() * scale_b)).to(torch.bfloat16)
