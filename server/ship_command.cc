// `logdex ship`: parse log lines, chunk them per stream and produce them to
// Kafka (the work is in ship/pipeline.h's RunShip).
#include <CLI/CLI.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/defaults.h"
#include "server/commands.h"
#include "ship/pipeline.h"

namespace logdex {

void AddShipCommand(CLI::App& app, CommandRun& run) {
  auto o = std::make_shared<ship::ShipCommandOptions>();
  auto kafka = std::make_shared<std::vector<std::string>>();
  auto no_progress = std::make_shared<bool>(false);
  auto progress = std::make_shared<bool>(false);
  o->producer.topic = std::string(kDefaultTopic);
  CLI::App* cmd = app.add_subcommand(
      "ship",
      "Parse log lines, pack them into compressed chunks per stream (app, host, severity) and produce them to "
      "Kafka.\nExits 0 once every chunk is delivered; otherwise 1, saying on stderr what was not delivered.");
  cmd->footer(
      "Usage:\n"
      "  logdex ship --brokers LIST [--topic T] --app A --host H\n"
      "              --format auto|log4j|syslog|json|logfmt|apache|logcat|regex [--regex RE]\n"
      "              [--time-format FMT] [OPTIONS] FILE...|-\n"
      "\n"
      "Examples:\n"
      "  logdex ship --brokers k1:9092 --app billing --host web1 --format log4j /var/log/billing.log\n"
      "  journalctl -o short | logdex ship --brokers k1:9092 --app sys --host web1 --format syslog -\n"
      "  logdex ship --brokers k1:9092 --app api --host web1 --format regex \\\n"
      "      --regex '^(?P<ts>\\S+ \\S+) (?P<level>\\w+) (?P<msg>.*)$' --time-format '%Y-%m-%d %H:%M:%S.%f' api.log\n"
      "  logdex ship --app a --host h --dry-run --out chunks.bin app.log   # no Kafka: length-prefixed chunks\n"
      "  logdex ship --check /var/log/syslog app.log   # how each file will be read, before shipping it\n"
      "\n"
      "Records: one per line, plus continuation lines (indented, 'Caused by:', exception names) joined to the\n"
      "line before. --format auto chooses one format per file from its first 32 lines and keeps it; lines that\n"
      "do not match it keep their text with --default-severity and the time of the record before. Times serve\n"
      "would refuse (before 2000, over a day ahead) become the time of shipping, tagged logdex_restamped_from.\n"
      "Nothing is dropped.\n"
      "Tag keys never contain '=': it becomes '_'.\n"
      "--dry-run output: repeated [4-byte big-endian length][serialized logdex.proto.LogChunk].");

  auto& p = o->pipeline;
  cmd->add_option("--brokers", o->producer.brokers, "Kafka bootstrap servers, host:port[,host:port...]");
  cmd->add_option("--topic", o->producer.topic, "Kafka topic")->capture_default_str();
  cmd->add_option("--app", p.chunker.app, "Application name of the stream (required, except with --check)");
  cmd->add_option("--host", p.chunker.host, "Host name of the stream (required, except with --check)");
  cmd->add_flag("--check", o->check,
                "Ship nothing: print how each file reads (format, lines, records, unparsed lines, time range, "
                "severities, records re-stamped or past --retention, examples)");
  cmd->add_option("--retention", o->retention,
                  "Records older than this are counted and reported: serve keeps them, no query reaches them "
                  "(serve's store.ttl, default 7d; 0 = not checked)")
      ->capture_default_str();
  cmd->add_option("--format", o->format, "Line format")
      ->check(CLI::IsMember({"auto", "log4j", "syslog", "json", "logfmt", "apache", "logcat", "regex"}))
      ->capture_default_str();
  cmd->add_option("--regex", p.parser.regex,
                  "RE2 regex for --format regex; named groups (?P<ts>) (?P<level>) (?P<msg>) (?P<host>) (?P<app>), "
                  "any other group becomes a tag");
  cmd->add_option("--time-format", p.parser.time_format,
                  "strptime-style timestamp format, %f = fraction of a second (default: common formats)");
  cmd->add_option("--time-zone", p.parser.time_zone,
                  "Zone of timestamps without an offset: UTC, +02:00 or an IANA name like Europe/Berlin")
      ->capture_default_str();
  cmd->add_option("--default-severity", o->default_severity, "Severity of lines that carry none")
      ->capture_default_str();
  cmd->add_flag("--no-multiline", o->no_multiline, "Never join continuation lines (always off for json)");
  cmd->add_flag("--stream-from-line", o->stream_from_line,
                "Let a line's own host/app (syslog) choose its stream; by default they become tags host=, app=");
  cmd->add_option("inputs", p.inputs, "Files to ship, or - for stdin")->required();
  cmd->add_flag("--follow,-f", p.follow,
                "Keep following the files (survives rotation and truncation; positions checkpointed in "
                "--state-dir); stop with SIGINT/SIGTERM");
  cmd->add_option("--state-dir", p.state_dir,
                  "Producer id, sequence numbers, read checkpoints and the journal that makes --follow "
                  "exactly-once across crashes (default "
                  "$XDG_STATE_HOME or ~/.local/state, /logdex/ship/APP@HOST)");
  cmd->add_option("--journal-max-bytes", p.journal_max_bytes,
                  "--follow: the crash journal in --state-dir stays under this many bytes (a long Kafka outage "
                  "fills it); past it chunks are sent unjournaled and counted")
      ->capture_default_str();
  cmd->add_flag("--dry-run", o->dry_run, "Do not produce: write the chunks to --out");
  cmd->add_option("--out", o->out, "Dry-run output file (- for stdout)");
  cmd->add_option("--kafka", *kafka, "librdkafka setting KEY=VALUE (repeatable), e.g. --kafka security.protocol=ssl");
  cmd->add_option("--max-chunk-bytes", p.chunker.max_chunk_bytes, "Flush a stream at this many uncompressed bytes")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-chunk-records", p.chunker.max_chunk_records, "Flush a stream at this many records")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  static const std::map<std::string, proto::Codec> kCodecs{
      {"snappy", proto::CODEC_SNAPPY},
      {"zstd", proto::CODEC_ZSTD},
      {"zstd-columns", proto::CODEC_ZSTD_COLUMNS},
      {"none", proto::CODEC_NONE}};
  cmd->add_option("--codec", p.chunker.codec,
                  "Chunk payload compression: zstd (smaller: level 1 costs about what snappy does), zstd-columns "
                  "(records laid out by columns, then zstd: about a fifth smaller again, for about 10 % more CPU; "
                  "serve reads it from this version on), snappy or none")
      ->transform(CLI::CheckedTransformer(kCodecs, CLI::ignore_case))
      ->default_str("zstd");
  cmd->add_option("--zstd-level", p.chunker.zstd_level, "zstd level with --codec zstd or zstd-columns (1 fastest .. 19 smallest)")
      ->capture_default_str()
      ->check(CLI::Range(kMinZstdLevel, kMaxZstdLevel));
  cmd->add_option("--linger-ms", p.chunker.linger_ms, "Flush a stream whose oldest record waited this long")
      ->capture_default_str();
  cmd->add_option("--alert-linger-ms", p.chunker.alert_linger_ms, "Linger for ERROR and FATAL streams")
      ->capture_default_str();
  cmd->add_option("--backlog-bytes", o->producer.backlog_max_bytes,
                  "Bound of the backlog kept while Kafka is down (oldest chunks dropped beyond it; 0 = none)")
      ->capture_default_str();
  cmd->add_option("--backlog-chunks", o->producer.backlog_max_chunks, "Bound of the backlog in chunks (0 = none)")
      ->capture_default_str();
  cmd->add_option("--unavailable-after-ms", o->producer.unavailable_after_ms,
                  "Kafka counts as down after this long without delivery progress")
      ->capture_default_str();
  cmd->add_option("--delivery-timeout-ms", p.delivery_timeout_ms,
                  "At the end, wait this long for the last deliveries before reporting failure")
      ->capture_default_str();
  cmd->add_flag("--progress", *progress, "Print a progress line on stderr (default: when stderr is a TTY)");
  cmd->add_flag("--no-progress", *no_progress, "Never print the progress line");

  cmd->callback([&run, o, kafka, progress, no_progress] {
    for (const std::string& kv : *kafka) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) throw CLI::ValidationError("--kafka", "expected KEY=VALUE, got " + kv);
      o->producer.kafka.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    }
    if (*progress || *no_progress) {
      o->progress_flag_set = true;
      o->progress = *progress && !*no_progress;
    }
    run = [o] { return o->check ? ship::RunShipCheck(*o) : ship::RunShip(*o); };
  });
}

}  // namespace logdex
