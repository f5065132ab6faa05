# cmake -P script: compiles the binding's Java sources (SWIG's, known only after SWIG ran, and the
# hand-written ones) and packs them with the native libraries into one jar.
#   SOURCES_DIRS  '|'-separated folders of .java files
#   LIBS          '|'-separated FILE=NAME pairs, stored as NATIVE/NAME
string(REPLACE "|" ";" dirs "${SOURCES_DIRS}")
set(sources)
foreach(dir IN LISTS dirs)
  file(GLOB s "${dir}/*.java")
  list(APPEND sources ${s})
endforeach()

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/${NATIVE}")
# -nowarn hides SWIG's finalize() deprecations.
execute_process(COMMAND "${JAVAC}" -encoding UTF-8 -nowarn -d "${WORK}" ${sources}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "javac failed")
endif()

string(REPLACE "|" ";" libs "${LIBS}")
foreach(pair IN LISTS libs)
  string(REGEX MATCH "^(.*)=([^=]*)$" _ "${pair}")
  file(COPY_FILE "${CMAKE_MATCH_1}" "${WORK}/${NATIVE}/${CMAKE_MATCH_2}")
endforeach()

execute_process(COMMAND "${JAR}" --create --file "${OUT}" -C "${WORK}" . RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "jar failed")
endif()
