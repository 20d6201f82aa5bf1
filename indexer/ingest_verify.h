// What ingest checks of a chunk's payload beyond its header and crc32c
// (IndexerOptions::verify, serve's indexer.verify).
#pragma once

namespace logdex {

// Only kFull can refuse a chunk whose header lies about its records (their
// count, times or severity): with the lighter checks such a chunk is stored
// under the header's index rows, and every query then skips it as corrupt,
// so its records are never found and were never dead-lettered. kFull is the
// default; the others are for producers the operator trusts.
enum class IngestVerify {
  kHeader,  // the declared length: snappy's length header, zstd's frame content size (size and limit)
  kSnappy,  // and one pass over the compressed stream (snappy or zstd; `verify: stream` or `snappy`)
  kFull,    // decompress and check every record of every chunk; the default
};

}  // namespace logdex
