# Writes a GGUF imatrix (in_sum2 / counts tensors) for make_model.py's tensors with gguf-py.
# usage: make_imatrix_gguf.py OUT.gguf N_LAYER [N_EMBD [N_FF]]
import sys, numpy as np, gguf
n_layer = int(sys.argv[2])
n_embd = int(sys.argv[3]) if len(sys.argv) > 3 else 256
n_ff = int(sys.argv[4]) if len(sys.argv) > 4 else 768
rng = np.random.default_rng(11)
w = gguf.GGUFWriter(sys.argv[1], "")
w.add_type("imatrix")
w.add_array("imatrix.datasets", ["calib-a.txt", "calib-b.txt"])
w.add_uint32("imatrix.chunk_count", 7); w.add_uint32("imatrix.chunk_size", 512)
for i in range(n_layer):
    for n, c in [("attn_q",n_embd),("attn_k",n_embd),("attn_v",n_embd),("attn_output",n_embd),("ffn_gate",n_embd),("ffn_up",n_embd),("ffn_down",n_ff)]:
        cnt = float(512*7)
        w.add_tensor(f"blk.{i}.{n}.weight.in_sum2", (np.exp(rng.standard_normal(c))*cnt).astype(np.float32))
        w.add_tensor(f"blk.{i}.{n}.weight.counts", np.array([cnt], np.float32))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
