"""`bench e2e --breakdown`: a forward's GPU time by kind of kernel, from the kernels' names. The names below are
the ones torch.profiler gave a compiled Wan2.1-1.3B forward on an H100 (torch 2.11, cuDNN 9, Triton 3.6)."""

from lowbit_video.bench.e2e import KINDS, kernel_kind, project_kernel_names


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
