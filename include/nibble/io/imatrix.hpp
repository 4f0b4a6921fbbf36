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

/// Raw statistics as llama-imatrix collects them: per weight, the sums over all tokens of the
/// squared inputs of every column (n_per_row * n_mat values) and the number of tokens seen per
/// matrix (n_mat counts; n_mat = 1 for plain 2-D weights).
struct ImatrixStats {
  /// One weight's statistics.
  struct Entry {
    std::vector<float> sums;           ///< sum of x^2 per input column (and matrix)
    std::vector<std::int64_t> counts;  ///< tokens per matrix
  };
  std::map<std::string, Entry> entries;  ///< weight name -> statistics
  std::vector<std::string> datasets;     ///< calibration data set names (file names)
  int chunks = 0;                        ///< chunks processed
  int chunk_size = 0;                    ///< tokens per chunk (n_ctx)

  /// Adds n rows of `cols` inputs of weight `name` (sums of squares in float, count += n).
  /// Throws if `cols` differs from earlier calls for the same name.
  void add(const std::string& name, const float* x, std::int64_t n, std::int64_t cols);
};

/// Writes `s` as a GGUF imatrix like llama-imatrix (--output-format gguf): general.type
/// "imatrix", imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size, and per weight NAME
/// (in name order) f32 tensors NAME.in_sum2 [n_per_row, n_mat] and NAME.counts [1, n_mat]
/// (written with trailing dimensions of 1 dropped, as ggml does).
/// Written to PATH.tmp and renamed. Throws on empty statistics or I/O errors.
void write_imatrix_gguf(const std::string& path, const ImatrixStats& s);

/// Writes `s` in llama-imatrix's legacy format (--output-format dat): entries in name order
/// with ncall = ceil(max count / chunk_size) and values sum / count * ncall (1 for a matrix that
/// saw no tokens; entries that saw none at all are skipped), then the chunk count and the last
/// data set name. Throws on empty statistics, chunk_size < 1 or I/O errors.
void write_imatrix_dat(const std::string& path, const ImatrixStats& s);

/// Writes `m` in the legacy binary format (entries in name order, ncall = 1, so the values are
/// stored as given); used by tests and tools.
void write_legacy_imatrix(const std::string& path, const Imatrix& m);

}  // namespace nibble
