"""Where the sage2-int8 kernel's difference to the reference engine comes from: the kernel's own pre-pass
operands, P̃ quantized to E4M3 per 128-key tile exactly as the reference does, in float64 (emulation),
against the kernel (FP8 MMAs, exp2 in fp32) and the reference. Prints one JSON line."""
import json, math, sys
import torch
sys.path.insert(0, "tests")
from test_kernels_attention import make_qkv, rel_l2
from lowbit_video.attention import attend, exact_attention
from lowbit_video.kernels import prepass
from lowbit_video.kernels.launch import attention

res = {}
for outl in (False, True):
    b, h, n, d = 2, 3, 384, 64
    q, k, v = make_qkv(b, h, n, n, d, outliers=outl, seed=7, dtype=torch.float32)
    qc_, kc_, vc_ = q.cuda(), k.cuda(), v.cuda()
    out = {pr: attention(qc_, kc_, vc_, "sage2-int8", promote=pr).double().cpu() for pr in (True, False)}
    Q, QS, K, KS, VT, SV = (t.double().cpu() for t in prepass.sage_prepass(qc_, kc_, vc_, "BHND"))
    s32 = float(torch.tensor(0.002232142857142857, dtype=torch.float32))
    S = (Q[:, :n] * QS[:, :n, None]) @ (K[:, :n] * KS[:, :n, None]).transpose(1, 2) / math.sqrt(d)
    V = (VT[:, :, :n] * SV[:, :, None]).transpose(1, 2)
    m = torch.full((b * h, n, 1), -math.inf, dtype=torch.float64); l = torch.zeros_like(m); acc = torch.zeros(b * h, n, d, dtype=torch.float64)
    for t0 in range(0, n, 128):
        st = S[:, :, t0:t0 + 128]; mn = torch.maximum(m, st.amax(-1, keepdim=True)); a = torch.exp(m - mn); p = torch.exp(st - mn)
        ph = (p / s32).float().clamp(max=448).to(torch.float8_e4m3fn).double() * s32
        l = a * l + p.sum(-1, keepdim=True); acc = a * acc + ph @ V[:, t0:t0 + 128]; m = mn
    emu = (acc / l).reshape(b, h, n, d)
    ref = attend(q.float(), k.float(), v.float(), "sage2-int8", backend="reference").double()
    ex = exact_attention(q.float(), k.float(), v.float())
    res[f"outliers={outl}"] = dict(recipe_err=rel_l2(ref, ex), emu_vs_ref=rel_l2(emu, ref), kernel_vs_emu=rel_l2(out[True], emu),
                                   kernel_noprom_vs_emu=rel_l2(out[False], emu), kernel_vs_ref=rel_l2(out[True], ref))
print(json.dumps(res))
