# Tests on a real HBase 2.6 and its Thrift2 gateway (scripts/engines/hbase.sh), label
# real-engine: HBaseRealGateway.* and the store conformance suite's hbase_real backend,
# per transport/protocol (and alerting's backend suite on framed/binary). Included from
# tests/engines/CMakeLists.txt. Skipped (exit 77) when Maven Central or the gateway's jar
# cannot be had here.
if(TARGET logdex_hbase_tests AND TARGET logdex_tests)
  set(logdex_hbase_run ${PROJECT_SOURCE_DIR}/tests/engines/hbase_run.sh)
  foreach(mode framed.binary buffered.binary framed.compact)
    string(REPLACE "." ";" parts ${mode})
    list(GET parts 0 transport)
    list(GET parts 1 protocol)
    # On one of them, alerting's backend suite too (members racing for alert state).
    set(logdex_hbase_more)
    if(mode STREQUAL "framed.binary")
      set(logdex_hbase_more -- $<TARGET_FILE:logdex_alerting_tests> --gtest_filter=AllBackends/*/hbase_real)
    endif()
    add_test(NAME real.hbase.${transport}_${protocol}
      COMMAND ${logdex_hbase_run} ${transport} ${protocol}
        -- $<TARGET_FILE:logdex_hbase_tests> --gtest_filter=HBaseRealGateway.*
        -- $<TARGET_FILE:logdex_tests> --gtest_filter=Backends/StoreConformance.*/hbase_real
        ${logdex_hbase_more})
    # One engine JVM at a time, never beside a load test: the machines have 2 cores (the
    # lock is the Kafka tests' and the load tests', CMakeLists.txt).
    set_tests_properties(real.hbase.${transport}_${protocol} PROPERTIES
      LABELS real-engine SKIP_RETURN_CODE 77 TIMEOUT 900 RESOURCE_LOCK logdex_heavy)
  endforeach()
  # The indexer and query suites (indexing, every query shape against a brute force, text
  # and token filters, budgets, cursors, volume) on one transport: each test has its own
  # namespace of a dozen tables, so HBase gets a larger heap (768 MiB ran out at about 20).
  add_test(NAME real.hbase.indexer_query
    COMMAND ${CMAKE_COMMAND} -E env LOGDEX_HBASE_HEAP=2g ${logdex_hbase_run} framed binary
      -- $<TARGET_FILE:logdex_indexer_tests> --gtest_filter=Backends/*/hbase_real)
  set_tests_properties(real.hbase.indexer_query PROPERTIES
    LABELS real-engine SKIP_RETURN_CODE 77 TIMEOUT 1800 RESOURCE_LOCK logdex_heavy)
endif()
