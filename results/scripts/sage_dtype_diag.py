import sys, torch, json
sys.path.insert(0, "tests")
from test_kernels_attention import make_qkv, rel_l2
from lowbit_video.attention import attend, exact_attention
from lowbit_video.kernels.launch import attention
r = {}
for dt in (torch.bfloat16, torch.float32):
    for shape in ((2, 3, 300, 200, 64), (2, 3, 384, 384, 64), (1, 2, 257, 384, 128)):
        b, h, nq, nk, d = shape
        q, k, v = make_qkv(b, h, nq, nk, d, outliers=False, seed=nq + d, dtype=dt)
        o = attention(q.cuda(), k.cuda(), v.cuda(), "sage2-int8").double().cpu()
        o32 = attention(q.float().cuda(), k.float().cuda(), v.float().cuda(), "sage2-int8").double().cpu()
        ref = attend(q.float(), k.float(), v.float(), "sage2-int8", backend="reference").double()
        ex = exact_attention(q.float(), k.float(), v.float())
        r[f"{dt}-{shape}"] = [rel_l2(o, ref), rel_l2(o32, ref), rel_l2(ref, ex), rel_l2(ref.to(dt), ref)]
print(json.dumps(r))
