// What ingest checks of a chunk's payload beyond its header and crc32c
// (IndexerOptions::verify, serve's indexer.verify).
#pragma once

namespace logdex {

enum class IngestVerify {
  kHeader,  // the snappy length header (size and limit); the default
  kSnappy,  // and one pass over the snappy stream (~30% of ingest CPU)
  kFull,    // decompress and check every record of every chunk
};

}  // namespace logdex
