// libFuzzer target: any bytes as a Kafka message marked `logdex-format: json`,
// through the JSON-lines decoder and the batch path serve runs on it, and
// through parse/'s JSON parser line by line (see lines_fuzz.h for the
// invariants). With LOGDEX_FUZZ_SEED_DIR set, it first writes seed messages
// there (lines_seeds.h); json.dict is its dictionary.
#include <cstdlib>

#include "tests/fuzz/lines_fuzz.h"
#include "tests/fuzz/lines_seeds.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("LOGDEX_FUZZ_SEED_DIR")) logdex::fuzz::WriteJsonSeeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static logdex::fuzz::LinesTarget* target = new logdex::fuzz::LinesTarget();  // lives for the process
  target->Run(data, size, logdex::InputFormat::kJson);
  return 0;
}
