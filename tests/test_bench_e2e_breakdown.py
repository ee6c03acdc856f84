"""`bench e2e --breakdown`: a forward's GPU time by kind of kernel, from the kernels' names. The names below are
the ones torch.profiler gave a compiled Wan2.1-1.3B forward on an H100 (torch 2.11, cuDNN 9, Triton 3.6)."""

import pytest

from lowbit_video.bench.e2e import KINDS, gpu_busy, gpu_work, kernel_kind, project_kernel_names


def test_this_packages_kernels_are_found_by_name():
    ours = project_kernel_names()
    # the launched kernels of the sage2 call: its two pre-pass launches and the Gluon attention kernel
    assert {"_sage_q_and_stats_kernel", "_sage_kv_codes_kernel", "attn_ws_fwd", "attn_fwd", "draft_ws_fwd"} <= ours
    assert "sage_prepass" not in ours  # the host function that launches them is no kernel


def test_kernels_sorted_by_kind():
    ours = project_kernel_names()
    expected = {
        "attn_ws_fwd": "quantized attention",
        "draft_fwd": "quantized attention",
        "_sage_kv_codes_kernel": "pre-pass and route",
        "_sage_q_and_stats_kernel": "pre-pass and route",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0":
            "SDPA (16-bit attention)",
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false>>":
            "SDPA (16-bit attention)",
        "nvjet_sm90_tst_256x152_64x4_1x2_h_bz_coopA_bias_TNT": "GEMM",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": "GEMM",
        # Inductor names a fused kernel after the ops it fused, the attention op it sat next to included
        "triton_red_fused__fused_rms_norm__scaled_dot_product_cudnn_attention_permute_view_3":
            "Inductor (fused norms, RoPE, elementwise)",
        "triton_poi_fused_gelu_view_6": "Inductor (fused norms, RoPE, elementwise)",
        "Memset (Device)": "other",
        "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel":
            "other",
    }
    assert {name: kernel_kind(name, ours) for name in expected} == expected
    assert set(expected.values()) == set(KINDS)


def test_gpu_idle_is_the_span_that_no_work_covers():
    # µs: two overlapping kernels (two streams) 0-10 and 5-12 ms, a gap, then 20-30 ms: span 30, busy 12 + 10
    assert gpu_busy([(20000, 30000), (0, 10000), (5000, 12000)]) == {"span_ms": 30.0, "idle_ms": 8.0}
    assert gpu_busy([(0, 4000), (1000, 2000)]) == {"span_ms": 4.0, "idle_ms": 0.0}  # one inside another
    assert gpu_busy([]) == {}


def test_gpu_work_is_read_from_the_chrome_trace():
    # the shape of torch.profiler's export_chrome_trace: GPU work as complete ("X") events of these categories
    trace = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "attn_ws_fwd", "ts": 100.0, "dur": 50.0},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset", "ts": 160.0, "dur": 2.0},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 170.0, "dur": 5.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 90.0, "dur": 8.0},  # the host's
        {"ph": "f", "cat": "ac2g", "name": "flow", "ts": 100.0},
    ]}
    assert gpu_work(trace) == [("attn_ws_fwd", 100.0, 150.0), ("Memset", 160.0, 162.0), ("Memcpy HtoD", 170.0, 175.0)]


@pytest.mark.gpu
def test_gpu_a_host_pause_between_launches_is_idle_time():
    # two GEMMs with the host asleep for 20 ms between their launches: the GPU waits that long for the second one
    import time

    import torch

    from lowbit_video.bench.e2e import profile_forward

    a = torch.randn(2048, 2048, device="cuda")

    def forward():
        a @ a
        torch.cuda.synchronize()
        time.sleep(0.02)
        a @ a

    kinds, timeline = profile_forward(forward)
    assert sum(k["kernels"] for k in kinds.values()) == 2, kinds
    assert timeline["idle_ms"] >= 19.0, timeline
    # one stream: the busy part of the span is the two kernels' time (each figure rounded to 0.01 ms)
    busy = timeline["span_ms"] - timeline["idle_ms"]
    assert abs(busy - sum(k["ms"] for k in kinds.values())) <= 0.05, (timeline, kinds)
