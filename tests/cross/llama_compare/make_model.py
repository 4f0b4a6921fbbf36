# Writes a small llama-architecture GGUF (random weights) with llama.cpp's gguf-py.
# usage: make_model.py OUT.gguf N_LAYER N_HEAD_KV f32|f16|bf16 [N_EMBD [N_FF]]
# 4 query heads; N_EMBD (default 256) and N_FF (default 768) set the row lengths, so values that
# are not multiples of 256 (or 32) exercise llama-quantize's fallback types.
import sys, numpy as np, gguf
out, n_layer, n_head_kv, dtype = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
n_embd = int(sys.argv[5]) if len(sys.argv) > 5 else 256
n_ff = int(sys.argv[6]) if len(sys.argv) > 6 else 768
n_head, vocab = 4, 512
rng = np.random.default_rng(5)
w = gguf.GGUFWriter(out, "llama")
w.add_name("cmp-test")
w.add_block_count(n_layer); w.add_context_length(512); w.add_embedding_length(n_embd)
w.add_feed_forward_length(n_ff); w.add_head_count(n_head); w.add_head_count_kv(n_head_kv)
w.add_rope_freq_base(10000.0); w.add_layer_norm_rms_eps(1e-5)
w.add_file_type({"f32": 0, "f16": 1, "bf16": 32}[dtype])
w.add_tokenizer_model("llama")
w.add_token_list([f"t{i}".encode() for i in range(vocab)])
w.add_token_scores([0.0]*vocab); w.add_token_types([1]*vocab)

def bf16_bits(a):
    # round to nearest even, as ggml's fp32 -> bf16 (no NaNs here)
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)

def T(name, shape, norm=False):
    a = (1.0 + 0.1*rng.standard_normal(shape)) if norm else 0.02*rng.standard_normal(shape)*np.exp(0.5*rng.standard_normal((shape[0],1) if len(shape)==2 else 1))
    a = a.astype(np.float32)
    if norm or dtype == "f32":
        w.add_tensor(name, a)
    elif dtype == "f16":
        w.add_tensor(name, a.astype(np.float16))
    else:
        w.add_tensor(name, bf16_bits(a), raw_dtype=gguf.GGMLQuantizationType.BF16)
hd = n_embd // n_head
T("token_embd.weight", (vocab, n_embd))
for i in range(n_layer):
    b = f"blk.{i}."
    T(b+"attn_norm.weight", (n_embd,), True)
    T(b+"attn_q.weight", (n_embd, n_embd)); T(b+"attn_k.weight", (hd*n_head_kv, n_embd))
    T(b+"attn_v.weight", (hd*n_head_kv, n_embd)); T(b+"attn_output.weight", (n_embd, n_embd))
    T(b+"ffn_norm.weight", (n_embd,), True)
    T(b+"ffn_gate.weight", (n_ff, n_embd)); T(b+"ffn_up.weight", (n_ff, n_embd)); T(b+"ffn_down.weight", (n_embd, n_ff))
T("output_norm.weight", (n_embd,), True)
T("output.weight", (vocab, n_embd))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
