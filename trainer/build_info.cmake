# Writes OUT (build_info.h) with the commit the build is made from, run at every build (target
# zt_build_info) so a rebuild after a commit names the new one; the file is replaced only when
# it changes, so only trainer/version.cc recompiles. Inputs: SRC (the source tree), OUT.
set(commit "unknown (not a git checkout)")
set(dirty "")
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS ${SRC}/.git)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SRC} rev-parse --short=12 HEAD
                  OUTPUT_VARIABLE head RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0)
    set(commit ${head})
    execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SRC} status --porcelain --untracked-files=no
                    OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(changes)
      set(dirty ", with uncommitted changes")
    endif()
  endif()
endif()
file(WRITE ${OUT}.tmp "#define ZT_BUILD_COMMIT \"${commit}${dirty}\"\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
