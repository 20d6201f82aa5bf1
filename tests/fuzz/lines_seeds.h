// Seed messages for the line-decoder fuzz targets, written to
// $LOGDEX_FUZZ_SEED_DIR by LLVMFuzzerInitialize: real lines from the Loghub
// samples (tests/data/loghub/, see its LICENSE and CITATION), 1, 3 and 20
// lines per message, and JSON lines as shippers write them.
#pragma once

#include <fstream>
#include <string>
#include <vector>

namespace logdex::fuzz {

inline std::vector<std::string> LoghubLines(size_t per_file) {
  std::vector<std::string> lines;
  for (const char* name : {"Android", "Apache", "HDFS", "Linux", "OpenSSH", "OpenStack", "Spark"}) {
    std::ifstream in(std::string(LOGDEX_LOGHUB_DIR) + "/" + name + "_2k.log");
    std::string line;
    for (size_t i = 0; i < per_file && std::getline(in, line); ++i) lines.push_back(line);
  }
  return lines;
}

inline std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

inline void WriteSeed(const std::string& dir, const std::string& name, const std::string& value) {
  std::ofstream(dir + "/" + name, std::ios::binary) << value;
}

inline void WriteTextSeeds(const std::string& dir) {
  const std::vector<std::string> lines = LoghubLines(20);
  for (size_t i = 0; i < lines.size(); i += 20) {
    WriteSeed(dir, "one-" + std::to_string(i), lines[i]);
    WriteSeed(dir, "three-" + std::to_string(i), lines[i] + "\n" + lines[i + 1] + "\n" + lines[i + 2] + "\n");
    std::string all;
    for (size_t j = i; j < i + 20 && j < lines.size(); ++j) all += lines[j] + "\n";
    WriteSeed(dir, "twenty-" + std::to_string(i), all);
  }
  WriteSeed(dir, "continuation", "2026-12-01 10:00:00,123 ERROR boom\n\tat a.b.C(C.java:1)\n\tat d.e.F(F.java:2)\n");
  WriteSeed(dir, "logfmt", "ts=2026-12-01T10:00:00Z level=warn msg=\"disk low\" host=h1 app=a1 free=3%\n");
  WriteSeed(dir, "syslog5424", "<165>1 2026-12-01T10:00:00.003Z host1 app1 123 ID47 [ex@1 k=\"v\"] hello\n");
}

inline void WriteJsonSeeds(const std::string& dir) {
  const std::vector<std::string> lines = LoghubLines(3);
  std::string all;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string j = "{\"@timestamp\":\"2026-12-01T10:00:0" + std::to_string(i % 10) +
                          ".123Z\",\"level\":\"INFO\",\"host\":\"h" + std::to_string(i % 3) +
                          "\",\"app\":\"loghub\",\"message\":" + JsonString(lines[i]) + ",\"n\":" + std::to_string(i) +
                          "}";
    WriteSeed(dir, "loghub-" + std::to_string(i), j + "\n");
    all += j + "\n";
  }
  WriteSeed(dir, "loghub-all", all);
  WriteSeed(dir, "pino", "{\"level\":30,\"time\":1764583200000,\"pid\":7,\"hostname\":\"h\",\"msg\":\"hi\"}\n");
  WriteSeed(dir, "nested",
            "{\"ts\":1764583200.5,\"lvl\":\"error\",\"service\":\"pay\",\"host\":\"p1\",\"msg\":\"declined\","
            "\"ctx\":{\"user\":{\"id\":7,\"tags\":[1,2,[3,{\"a\":null}]]}},\"ok\":false,\"f\":-1.5e3}\n");
  WriteSeed(dir, "escapes",
            "{\"time\":\"2026-12-01T10:00:00Z\",\"msg\":\"tab\\tquote\\\" \\u00e9 \\ud83d\\ude00\",\"k=v\":\"x\"}\n");
  WriteSeed(dir, "rsyslog",
            "{\"@timestamp\":\"2026-12-01T10:00:00+01:00\",\"host\":\"web1\",\"app\":\"sshd\",\"severity\":"
            "\"notice\",\"message\":\"Accepted publickey for root\"}\n");
  WriteSeed(dir, "two-streams",
            "{\"ts\":\"2026-12-01T10:00:00Z\",\"app\":\"a\",\"host\":\"h\",\"msg\":\"1\"}\n"
            "{\"ts\":\"2026-12-01T10:00:01Z\",\"app\":\"b\",\"host\":\"h\",\"msg\":\"2\",\"level\":\"FATAL\"}\n");
}

}  // namespace logdex::fuzz
