// nibble: llama.cpp importance-matrix files (both formats llama-quantize reads).
//
// Legacy binary "imatrix.dat" (little-endian): i32 n_entries; per entry: i32 name length, the
// name bytes, i32 ncall, i32 nval, nval f32 values (sums of squared activations over ncall
// calls); optionally followed by i32 chunk count, i32 dataset-name length and the name.
// GGUF imatrix: a GGUF file with keys imatrix.datasets (string array), imatrix.chunk_count and
// imatrix.chunk_size (u32) and, per weight NAME, f32 tensors NAME.in_sum2 [n_per_row, n_mat]
// and NAME.counts [1, n_mat].
// Both are turned into mean squared activations exactly as llama-quantize does: legacy values
// are divided by ncall (when ncall > 0); GGUF sums are divided by their matrix's count, and a
// matrix whose count is 0 gets all ones.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nibble {

/// An importance matrix: per weight tensor name, the importance of each input column
/// (n_per_row values, or n_per_row * n_expert for 3-D expert tensors).
struct Imatrix {
  std::map<std::string, std::vector<float>> entries;  ///< weight name -> importance values
  std::vector<std::string> datasets;                  ///< calibration data set names (may be empty)
  int chunks = 0;                                     ///< chunks the statistics were collected on
  bool gguf_format = false;                           ///< true if read from the GGUF format

  /// Values for `tensor_name`, or nullptr.
  const std::vector<float>* find(const std::string& tensor_name) const;
};

/// Reads an imatrix file in either format (GGUF detected by its magic). Every length and count
/// is checked against the file size; malformed files and non-finite values throw nibble::Error.
Imatrix read_imatrix(const std::string& path);

/// Parses an imatrix held in memory (either format).
Imatrix parse_imatrix(const void* data, std::size_t size);

/// Writes `m` in the legacy binary format (entries in name order, ncall = 1, so the values are
/// stored as given); used by tests and tools.
void write_legacy_imatrix(const std::string& path, const Imatrix& m);

}  // namespace nibble
