# cmake -P script: compiles SWIG's C# sources (known only after SWIG ran) and the hand-written
# ones into one assembly.
#   CSC  compiler (mcs)   SOURCES_DIRS  '|'-separated folders   OUT  the .dll
string(REPLACE "|" ";" dirs "${SOURCES_DIRS}")
set(sources)
foreach(dir IN LISTS dirs)
  file(GLOB s "${dir}/*.cs")
  list(APPEND sources ${s})
endforeach()
get_filename_component(out_dir "${OUT}" DIRECTORY)
file(MAKE_DIRECTORY "${out_dir}")
string(REGEX REPLACE "\\.dll$" ".xml" doc "${OUT}")
# The XML doc file ships beside the assembly; SWIG's internal classes have no doc comments.
execute_process(COMMAND "${CSC}" -nologo -target:library -optimize+ -doc:${doc} -nowarn:1591
                        -out:${OUT} ${sources}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "C# compilation failed")
endif()
