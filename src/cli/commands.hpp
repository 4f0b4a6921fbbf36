// nibble CLI: subcommand entry points. Each takes the arguments after the subcommand name
// (argv[0] is the first argument, not the program name) and returns the process exit code.
#pragma once

#include <cstdio>

/// `nibble quantize IN.gguf OUT.gguf TYPE [--imatrix FILE] [--method rtn|gptq|awq]
/// [--calib FILE] [--threads N]`: llama-quantize-compatible quantization.
int cmd_quantize(int argc, char** argv);

/// `nibble pack IN.gguf OUT.gguf [--threads N]`: the packable tensors in the packed layout
/// (nibble/io/packed_gguf.hpp).
int cmd_pack(int argc, char** argv);

/// `nibble unpack IN.gguf OUT.gguf [--threads N]`: the inverse of `nibble pack`.
int cmd_unpack(int argc, char** argv);

/// `nibble info FILE.gguf [--all]`: metadata and tensor table of a GGUF file.
int cmd_info(int argc, char** argv);

/// `nibble perplexity MODEL.gguf [TEXT] [-c N] [--chunks N] [--kl-divergence-base FILE]
/// [--kl-divergence] [--kl-divergence-model BASE.gguf] [--tokens FILE]`: llama-perplexity.
int cmd_perplexity(int argc, char** argv);

/// `nibble imatrix MODEL.gguf [TEXT] -o OUT [-c N] [--chunks N] [--output-format gguf|dat]
/// [--tokens FILE]`: llama-imatrix.
int cmd_imatrix(int argc, char** argv);

/// `nibble tokenize MODEL.gguf (-p TEXT | -f FILE | --stdin) [--ids] [--no-bos]`: the tokens
/// of a text, printed like llama-tokenize (--no-escape --no-parse-special).
int cmd_tokenize(int argc, char** argv);

/// `nibble bench MODEL.gguf [-t N] [--packed] [--min-time S] [--membw-bytes N]`: the model decode
/// step (one GEMV through every linear weight of the file, weights in DRAM) in tokens/s and as a
/// fraction of this machine's memory read bandwidth, at 1 and 2 threads (or N); --packed times
/// the plain and the packed layout side by side.
int cmd_bench_model(int argc, char** argv);
/// The usage text of `nibble bench MODEL.gguf` (also part of `nibble bench --help`).
void bench_model_usage(std::FILE* out);
