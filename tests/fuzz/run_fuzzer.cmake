# Runs one fuzz target for SECONDS from its seeds (CTest test fuzz_NAME; ./axle.sh fuzz runs the
# same). -D: FUZZER (the executable), NAME, SECONDS, SEEDS (tests/fuzz/NAME), WORK (the build
# tree: new inputs go to WORK/corpus/NAME, a crashing one to WORK/crashes/NAME-…).
file(MAKE_DIRECTORY ${WORK}/corpus/${NAME} ${WORK}/crashes)
execute_process(
  COMMAND ${FUZZER} -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048
          -malloc_limit_mb=1024 -max_len=65536 -print_final_stats=1
          -artifact_prefix=${WORK}/crashes/${NAME}-
          ${WORK}/corpus/${NAME} ${SEEDS}
  RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "fuzz target ${NAME} failed (exit ${result}); the input is in ${WORK}/crashes/")
endif()
