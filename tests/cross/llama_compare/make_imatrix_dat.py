# Writes a legacy imatrix.dat (llama-imatrix's old binary form) for make_model.py's tensors.
# usage: make_imatrix_dat.py OUT.dat N_LAYER [N_EMBD [N_FF]]
import sys, struct, numpy as np
n_layer = int(sys.argv[2])
n_embd = int(sys.argv[3]) if len(sys.argv) > 3 else 256
n_ff = int(sys.argv[4]) if len(sys.argv) > 4 else 768
rng = np.random.default_rng(9)
ents = []
for i in range(n_layer):
    for n, c in [("attn_q",n_embd),("attn_k",n_embd),("attn_v",n_embd),("attn_output",n_embd),("ffn_gate",n_embd),("ffn_up",n_embd),("ffn_down",n_ff)]:
        ents.append((f"blk.{i}.{n}.weight", (np.exp(rng.standard_normal(c))*3).astype(np.float32)))
ents.append(("output.weight", (np.exp(rng.standard_normal(n_embd))).astype(np.float32)))
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<i", len(ents)))
    for name, v in ents:
        b = name.encode(); f.write(struct.pack("<i", len(b))); f.write(b)
        f.write(struct.pack("<ii", 10, v.size)); f.write((v*10).astype(np.float32).tobytes())
    f.write(struct.pack("<i", 10)); ds=b"cmp-dataset"; f.write(struct.pack("<i", len(ds))); f.write(ds)
