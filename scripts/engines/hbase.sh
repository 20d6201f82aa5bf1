#!/usr/bin/env bash
# Real HBase (standalone: master, region server and ZooKeeper in one JVM) from Maven jars,
# with its Thrift2 gateway, on loopback, for tests. Nothing is installed system-wide.
#
#   scripts/engines/hbase.sh fetch                   jars into $LOGDEX_ENGINE_CACHE (reused)
#   scripts/engines/hbase.sh start DIR [framed|buffered] [binary|compact]
#                                                    HBase + Thrift2 gateway; DIR/thrift = host:port
#   scripts/engines/hbase.sh start-hbase DIR         HBase alone; DIR/zk = host:port of ZooKeeper
#   scripts/engines/hbase.sh stop DIR                gateway and HBase, waits for both to exit
#   scripts/engines/hbase.sh kill-thrift DIR         SIGKILL the gateway
#   scripts/engines/hbase.sh restart-thrift DIR      start the gateway again (same port, flags)
#   scripts/engines/hbase.sh kill-hbase DIR          SIGKILL HBase (master, region server, ZooKeeper)
#   scripts/engines/hbase.sh restart-hbase DIR       SIGKILL HBase if it runs, start it again on
#                                                    the same data and ports (ready as at start:
#                                                    its regions may still be recovering)
#   scripts/engines/hbase.sh logs DIR                print HBase's and the gateway's logs
#   scripts/engines/hbase.sh version                 the pinned HBase version
#
# The gateway (LOGDEX_HBASE_GATEWAY): `real` is HBase's own Thrift2 server from the
# org.apache.hbase:hbase-thrift jar; `bridge` is logdex's stand-in (hbase/bridge/: the
# THBaseService subset of store/hbase/hbase.thrift on HBase's Java client, built here with
# javac); `auto` (default) takes the real one when the registry serves it, else the bridge.
# The registry this project uses serves no hbase-thrift in any version (checked 2026-12).
#
# Exit codes: 0 ok; 1 failure (logs in DIR/logs); 77 Maven Central could not be reached;
# 78 LOGDEX_HBASE_GATEWAY=real but the registry serves no hbase-thrift jar; 2 usage.
# Every wait is a condition with a deadline (LOGDEX_HBASE_START_TIMEOUT, default 180 s):
# HBase is ready when a client lists its tables (Ping.java); the gateway when a request
# through it succeeds.
set -euo pipefail
HBASE_VERSION=2.6.4
here="$(cd "$(dirname "$0")" && pwd)"
cache="${LOGDEX_ENGINE_CACHE:-$HOME/.cache/logdex-engines}/hbase-$HBASE_VERSION-hadoop3"
libs="$cache/libs"
thrift_libs="$cache/thrift-libs"
deadline_s="${LOGDEX_HBASE_START_TIMEOUT:-180}"
# Extra arguments for every mvn call (e.g. -s SETTINGS for a mirror), split on spaces.
read -r -a mvn_args <<<"${LOGDEX_MAVEN_ARGS:-}"
heap="${LOGDEX_HBASE_HEAP:-768m}"
gateway="${LOGDEX_HBASE_GATEWAY:-auto}"
bridge_dir="$cache/bridge"
idl="$here/../../store/hbase/hbase.thrift"

# The flags HBase's own bin/hbase passes on JDK 11+ (hbase-surefire.jdk11.flags).
jdk_flags=(-Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true
  --add-modules jdk.unsupported
  --add-opens java.base/java.io=ALL-UNNAMED --add-opens java.base/java.nio=ALL-UNNAMED
  --add-opens java.base/sun.nio.ch=ALL-UNNAMED --add-opens java.base/java.lang=ALL-UNNAMED
  --add-opens java.base/jdk.internal.ref=ALL-UNNAMED
  --add-opens java.base/java.lang.reflect=ALL-UNNAMED --add-opens java.base/java.util=ALL-UNNAMED
  --add-opens java.base/java.util.concurrent=ALL-UNNAMED
  --add-exports java.base/jdk.internal.misc=ALL-UNNAMED
  --add-exports java.security.jgss/sun.security.krb5=ALL-UNNAMED
  --add-exports java.base/sun.net.dns=ALL-UNNAMED --add-exports java.base/sun.net.util=ALL-UNNAMED)

die() { echo "hbase.sh: $*" >&2; exit 1; }
usage() { sed -n '4,17p' "$0" >&2; exit 2; }

# mvn's output says whether the registry answered at all.
unreachable() { grep -qiE 'Could not transfer|No plugin found for prefix|UnknownHost|Connection refused|Connect timed out|Network is unreachable|No route to host' "$1"; }

fetch() {
  command -v mvn >/dev/null || die "mvn is not installed (Maven 3.8+ and a JDK 17)"
  case "$gateway" in auto|real|bridge) ;; *) die "LOGDEX_HBASE_GATEWAY must be auto, real or bridge" ;; esac
  mkdir -p "$cache"
  if [ ! -f "$libs/.complete" ]; then
    local log="$cache/fetch.log" tmp="$libs.tmp"
    rm -rf "$tmp"
    echo "hbase.sh: fetching HBase $HBASE_VERSION jars into $libs" >&2
    if ! mvn -q -B "${mvn_args[@]}" -f "$here/hbase/pom.xml" -Dhbase.version="$HBASE_VERSION" \
         dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" >"$log" 2>&1; then
      if unreachable "$log"; then
        echo "hbase.sh: Maven Central could not be reached (see $log); no HBase" >&2; exit 77
      fi
      cat "$log" >&2; die "fetching HBase $HBASE_VERSION failed"
    fi
    touch "$tmp/.complete"
    rm -rf "$libs"; mv "$tmp" "$libs"
  fi
  if [ "$gateway" = bridge ]; then build_bridge; return 0; fi
  # The registry said "no hbase-thrift" within the last day: the bridge, without asking it
  # again (an offline machine with everything cached still runs the tests).
  if [ "$gateway" = auto ] && [ ! -f "$thrift_libs/.complete" ] &&
     [ -n "$(find "$cache" -maxdepth 1 -name no-hbase-thrift -mmin -1440 2>/dev/null)" ]; then
    build_bridge
    return 0
  fi
  if [ ! -f "$thrift_libs/.complete" ]; then
    local log="$cache/fetch-thrift.log" tmp="$thrift_libs.tmp"
    rm -rf "$tmp"
    if ! mvn -q -B "${mvn_args[@]}" org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
         -Dartifact="org.apache.hbase:hbase-thrift:$HBASE_VERSION-hadoop3" \
         -Dtransitive=false -DoutputDirectory="$tmp" >"$log" 2>&1; then
      if unreachable "$log"; then
        echo "hbase.sh: Maven Central could not be reached (see $log)" >&2; exit 77
      fi
      if grep -qE 'Could not find artifact org.apache.hbase:hbase-thrift|hbase-thrift:(jar|pom):[^ ]* was not found' "$log"; then
        if [ "$gateway" = real ]; then
          echo "hbase.sh: HBase $HBASE_VERSION is fetched, but the registry serves no" \
               "org.apache.hbase:hbase-thrift (the Thrift2 gateway): no real gateway" >&2
          exit 78
        fi
        echo "hbase.sh: the registry serves no org.apache.hbase:hbase-thrift: using logdex's Thrift2 bridge" >&2
        touch "$cache/no-hbase-thrift"
        build_bridge
        return 0
      fi
      cat "$log" >&2; die "fetching hbase-thrift $HBASE_VERSION failed"
    fi
    touch "$tmp/.complete"
    rm -rf "$thrift_libs"; mv "$tmp" "$thrift_libs"
  fi
}

# logdex's Thrift2 bridge: libthrift (the thrift compiler's version) from Maven, Java
# generated from store/hbase/hbase.thrift, compiled against HBase's jars. Rebuilt when
# its sources change.
build_bridge() {
  command -v thrift >/dev/null || die "the bridge needs the thrift compiler (Debian: thrift-compiler)"
  command -v javac >/dev/null || die "the bridge needs javac (a JDK 17)"
  local stamp
  stamp=$( (thrift --version; cat "$idl" "$here/hbase/bridge/Thrift2Bridge.java" "$here/hbase/bridge/pom.xml") | sha256sum | cut -c1-16)
  [ -f "$bridge_dir/.complete" ] && [ "$(cat "$bridge_dir/.complete")" = "$stamp" ] && return 0
  local tmp="$bridge_dir.tmp" log="$cache/fetch-bridge.log" tv
  tv=$(thrift --version | awk '{print $3}')
  rm -rf "$tmp"; mkdir -p "$tmp/gen" "$tmp/classes"
  if ! mvn -q -B "${mvn_args[@]}" -f "$here/hbase/bridge/pom.xml" -Dthrift.version="$tv" dependency:copy-dependencies \
       -DincludeScope=runtime -DoutputDirectory="$tmp/libs" >"$log" 2>&1; then
    if unreachable "$log"; then echo "hbase.sh: Maven Central could not be reached (see $log)" >&2; exit 77; fi
    cat "$log" >&2; die "fetching libthrift $tv failed"
  fi
  thrift --gen java:generated_annotations=suppress -out "$tmp/gen" "$idl"
  javac -nowarn -encoding UTF-8 -d "$tmp/classes" -cp "$tmp/libs/*:$libs/*" \
    "$tmp/gen"/*.java "$here/hbase/bridge/Thrift2Bridge.java" >>"$log" 2>&1 || { cat "$log" >&2; die "building the bridge failed"; }
  echo "$stamp" >"$tmp/.complete"
  rm -rf "$bridge_dir"; mv "$tmp" "$bridge_dir"
}

# A free loopback port below the ephemeral range (free_ports.py says why).
free_port() { python3 "$here/free_ports.py" 1; }

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# ZooKeeper's, the master's and the region server's ports, chosen at the first start and
# kept in DIR/ports: a restarted HBase listens where the gateway's client looks for it, and
# its region server, on the same host and port with a new start code, makes the master
# recover the killed one's WAL at once (not after ZooKeeper's session timeout).
write_site() {
  local dir=$1 zk=$2 master=$3 rs=$4
  mkdir -p "$dir/conf" "$dir/logs" "$dir/zk-data" "$dir/tmp"
  cat >"$dir/conf/hbase-site.xml" <<XML
<?xml version="1.0"?>
<configuration>
  <property><name>hbase.cluster.distributed</name><value>false</value></property>
  <property><name>hbase.rootdir</name><value>file://$dir/root</value></property>
  <property><name>hbase.tmp.dir</name><value>$dir/tmp</value></property>
  <property><name>hbase.zookeeper.quorum</name><value>127.0.0.1</value></property>
  <property><name>hbase.zookeeper.property.clientPort</name><value>$zk</value></property>
  <property><name>hbase.zookeeper.property.dataDir</name><value>$dir/zk-data</value></property>
  <property><name>hbase.unsafe.stream.capability.enforce</name><value>false</value></property>
  <property><name>hbase.wal.provider</name><value>filesystem</value></property>
  <property><name>hbase.localcluster.assign.random.ports</name><value>false</value></property>
  <property><name>hbase.master.port</name><value>$master</value></property>
  <property><name>hbase.regionserver.port</name><value>$rs</value></property>
  <!-- The raw local file system: the WAL's hflush then reaches the kernel (the checksummed
       one keeps up to a checksum chunk in the JVM), so an acknowledged put survives a
       SIGKILL of HBase as it survives a region server's crash on HDFS. -->
  <property><name>fs.file.impl</name><value>org.apache.hadoop.fs.RawLocalFileSystem</value></property>
  <property><name>hbase.master.info.port</name><value>-1</value></property>
  <property><name>hbase.regionserver.info.port</name><value>-1</value></property>
  <property><name>hbase.master.ipc.address</name><value>127.0.0.1</value></property>
  <property><name>hbase.regionserver.ipc.address</name><value>127.0.0.1</value></property>
  <property><name>hbase.master.hostname</name><value>127.0.0.1</value></property>
  <property><name>hbase.unsafe.regionserver.hostname</name><value>127.0.0.1</value></property>
  <property><name>hbase.regionserver.handler.count</name><value>10</value></property>
  <property><name>hbase.thrift.info.port</name><value>-1</value></property>
</configuration>
XML
  cat >"$dir/conf/log4j.properties" <<'PROPS'
log4j.rootLogger=INFO,console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.target=System.err
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{2}: %m%n
log4j.logger.org.apache.zookeeper=WARN
log4j.logger.org.apache.hadoop.metrics2=WARN
PROPS
}

ping() { # DIR: one real request through ZooKeeper to the master and region server
  java "${jdk_flags[@]}" -Xmx256m -Dlog4j.configuration="file:$1/conf/log4j.properties" \
    -Dhbase.root.logger=WARN,console -cp "$1/conf:$libs/*" "$here/hbase/Ping.java" \
    "$1/conf/hbase-site.xml" 2>>"$1/logs/ping.log"
}

start_hbase() {
  local dir=$1
  [ -f "$libs/.complete" ] || (fetch_hbase_only)
  alive "$dir/master.pid" && die "HBase already runs from $dir (pid $(cat "$dir/master.pid"))"
  if [ ! -s "$dir/ports" ]; then
    python3 "$here/free_ports.py" 3 >"$dir/ports.tmp" && mv "$dir/ports.tmp" "$dir/ports"
  fi
  local zk master rs; read -r zk master rs <"$dir/ports"
  write_site "$dir" "$zk" "$master" "$rs"
  local t0=$SECONDS
  (cd "$dir" && exec java "${jdk_flags[@]}" -Xms128m -Xmx"$heap" -XX:+UseSerialGC \
      -Djava.io.tmpdir="$dir/tmp" -Dlog4j.configuration="file:$dir/conf/log4j.properties" \
      -cp "$dir/conf:$libs/*" org.apache.hadoop.hbase.master.HMaster start \
      >>"$dir/logs/master.log" 2>&1) &
  echo $! >"$dir/master.pid"
  local out
  while :; do
    alive "$dir/master.pid" || { tail -n 60 "$dir/logs/master.log" >&2; die "HBase exited during start (log: $dir/logs/master.log)"; }
    if out=$(ping "$dir"); then break; fi
    [ $((SECONDS - t0)) -lt "$deadline_s" ] || { tail -n 60 "$dir/logs/master.log" >&2; die "HBase not ready after ${deadline_s}s"; }
    sleep 1
  done
  echo "127.0.0.1:$zk" >"$dir/zk"
  echo "hbase.sh: $out; ready in $((SECONDS - t0)) s (ZooKeeper 127.0.0.1:$zk, logs $dir/logs)" >&2
}

fetch_hbase_only() { local rc=0; fetch || rc=$?; [ "$rc" -eq 0 ] || [ "$rc" -eq 78 ] || exit "$rc"; }
# Note: fetch exits (not returns) on 77/78, so fetch_hbase_only runs it in a subshell.

start_thrift() {
  local dir=$1 transport=$2 protocol=$3 port=${4:-}
  [ -n "$port" ] || port=$(free_port)
  echo "$transport $protocol $port" >"$dir/thrift.args"
  if [ "$gateway" != bridge ] && [ -f "$thrift_libs/.complete" ]; then
    start_real_thrift "$dir" "$transport" "$protocol" "$port"
  elif [ "$gateway" != real ] && [ -f "$bridge_dir/.complete" ]; then
    echo "logdex Thrift2Bridge (HBase's Java client; the registry serves no hbase-thrift)" >"$dir/gateway"
    (cd "$dir" && exec java "${jdk_flags[@]}" -Xmx256m -XX:+UseSerialGC \
        -Dlog4j.configuration="file:$dir/conf/log4j.properties" \
        -cp "$dir/conf:$bridge_dir/classes:$bridge_dir/libs/*:$libs/*" Thrift2Bridge \
        "$dir/conf/hbase-site.xml" "$port" "$transport" "$protocol" >>"$dir/logs/thrift.log" 2>&1) &
    echo $! >"$dir/thrift.pid"
  else
    echo "hbase.sh: no gateway built (run fetch; LOGDEX_HBASE_GATEWAY=$gateway)" >&2; return 78
  fi
  wait_thrift "$dir" "$transport" "$protocol" "$port"
}

start_real_thrift() {
  local dir=$1 transport=$2 protocol=$3 port=$4
  echo "HBase $HBASE_VERSION thrift2.ThriftServer" >"$dir/gateway"
  # Flags of thrift2.ThriftServer in 2.x (its base class's addOptions): -b bind address,
  # -p port, -f framed, -c compact; its info server is off through hbase-site.xml.
  # Not run here yet: the registry serves no hbase-thrift jar (fetch exits 78).
  local flags=(-b 127.0.0.1 -p "$port")
  [ "$transport" = framed ] && flags+=(-f)
  [ "$protocol" = compact ] && flags+=(-c)
  (cd "$dir" && exec java "${jdk_flags[@]}" -Xmx256m -XX:+UseSerialGC \
      -Dlog4j.configuration="file:$dir/conf/log4j.properties" \
      -cp "$dir/conf:$thrift_libs/*:$libs/*" org.apache.hadoop.hbase.thrift2.ThriftServer \
      "${flags[@]}" start >>"$dir/logs/thrift.log" 2>&1) &
  echo $! >"$dir/thrift.pid"
}

wait_thrift() { # DIR TRANSPORT PROTOCOL PORT: until a real request through the gateway succeeds
  local dir=$1 transport=$2 protocol=$3 port=$4
  rm -f "$dir/thrift"
  local t0=$SECONDS out
  while :; do
    alive "$dir/thrift.pid" || { tail -n 60 "$dir/logs/thrift.log" >&2; die "the gateway exited during start (log: $dir/logs/thrift.log)"; }
    if out=$(python3 "$here/hbase/thrift_probe.py" "127.0.0.1:$port" "$transport" "$protocol" 2>>"$dir/logs/probe.log"); then break; fi
    [ $((SECONDS - t0)) -lt "$deadline_s" ] || { tail -n 60 "$dir/logs/thrift.log" >&2; die "the gateway did not answer within ${deadline_s}s"; }
    sleep 0.5
  done
  echo "127.0.0.1:$port" >"$dir/thrift"
  echo "hbase.sh: gateway $(cat "$dir/gateway"), $transport/$protocol on 127.0.0.1:$port, answered in $((SECONDS - t0)) s ($out)" >&2
}

stop_pid() { # PIDFILE SIGNAL
  alive "$1" || { rm -f "$1"; return 0; }
  local pid; pid=$(cat "$1"); kill "-$2" "$pid" 2>/dev/null || true
  local t0=$SECONDS
  while kill -0 "$pid" 2>/dev/null; do
    if [ $((SECONDS - t0)) -ge 60 ]; then kill -KILL "$pid" 2>/dev/null || true; fi
    sleep 0.2
  done
  rm -f "$1"
}

# With HBASE_ENGINE_OWNER_PID set (tests/engines/hbase_run.sh sets its own pid), a watcher
# SIGKILLs DIR's JVMs once that process is gone: a test killed by ctest's timeout, whose EXIT
# trap cannot run, leaves no HBase behind. It polls once a second and ends with the JVMs.
watch_owner() {
  local dir=$1 owner=${HBASE_ENGINE_OWNER_PID:-}
  [ -n "$owner" ] || return 0
  setsid bash -c "sleep 5  # the JVMs' pid files appear
    alive() { [ -f \"\$1\" ] && kill -0 \"\$(cat \"\$1\")\" 2>/dev/null; }
    while kill -0 $owner 2>/dev/null && { alive '$dir/master.pid' || alive '$dir/thrift.pid'; }; do sleep 1; done
    for f in '$dir/thrift.pid' '$dir/master.pid'; do alive \"\$f\" && kill -KILL \"\$(cat \"\$f\")\"; done
    true" >/dev/null 2>&1 </dev/null &
}

cmd=${1:-}; shift || true
case "$cmd" in
  fetch) fetch ;;
  version) echo "$HBASE_VERSION-hadoop3" ;;
  start-hbase) [ $# -eq 1 ] || usage; mkdir -p "$1"; start_hbase "$(cd "$1" && pwd)" ;;
  start)
    [ $# -ge 1 ] || usage
    transport=${2:-framed}; protocol=${3:-binary}
    case "$transport" in framed|buffered) ;; *) usage ;; esac
    case "$protocol" in binary|compact) ;; *) usage ;; esac
    fetch
    mkdir -p "$1"; dir=$(cd "$1" && pwd)
    watch_owner "$dir"
    start_hbase "$dir"
    (start_thrift "$dir" "$transport" "$protocol") || { rc=$?; stop_pid "$dir/master.pid" TERM; exit "$rc"; } ;;
  stop)
    [ $# -eq 1 ] || usage
    stop_pid "$1/thrift.pid" TERM; stop_pid "$1/master.pid" TERM ;;
  kill-thrift) [ $# -eq 1 ] || usage; stop_pid "$1/thrift.pid" KILL ;;
  kill-hbase) [ $# -eq 1 ] || usage; stop_pid "$1/master.pid" KILL ;;
  restart-hbase)
    [ $# -eq 1 ] || usage; dir=$(cd "$1" && pwd)
    stop_pid "$dir/master.pid" KILL; watch_owner "$dir"; start_hbase "$dir" ;;
  restart-thrift)
    [ $# -eq 1 ] || usage; dir=$(cd "$1" && pwd)
    read -r transport protocol port <"$dir/thrift.args"
    stop_pid "$dir/thrift.pid" TERM; watch_owner "$dir"; start_thrift "$dir" "$transport" "$protocol" "$port" ;;
  logs)
    [ $# -eq 1 ] || usage
    for f in "$1"/logs/*.log; do [ -f "$f" ] && { echo "==> $f <=="; cat "$f"; }; done ;;
  *) usage ;;
esac
