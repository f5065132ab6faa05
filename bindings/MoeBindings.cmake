# Toolchain detection and options for the SWIG bindings. Included by bindings/ and by the
# examples/<language> directories (which CMake processes first), so each finds the same answers;
# every find here is cached, so repeating it is cheap.

find_package(SWIG 4.0 QUIET COMPONENTS java csharp go)

# Java: javac/jar/java plus jni.h. FindJNI also insists on libjawt and libjvm, which headless JDKs
# and many CI images lack, and only the header is needed to build a JNI library.
find_package(Java 11 QUIET COMPONENTS Development Runtime)
if(Java_JAVAC_EXECUTABLE)
  file(REAL_PATH "${Java_JAVAC_EXECUTABLE}" _moe_javac)
  get_filename_component(_moe_jdk "${_moe_javac}" DIRECTORY)
  get_filename_component(_moe_jdk "${_moe_jdk}" DIRECTORY)
  find_path(MOE_JNI_INCLUDE_DIR jni.h HINTS "${_moe_jdk}/include" "$ENV{JAVA_HOME}/include")
endif()
find_file(MOE_JUNIT_CONSOLE_JAR junit-platform-console-standalone.jar
          PATHS /usr/share/java DOC "JUnit 5 console launcher (Debian: junit5)")

# C#: Mono's compiler and runtime; NUnit 2.6 from Debian for the tests.
find_program(MOE_CSHARP_COMPILER NAMES mcs csc)
find_program(MOE_MONO mono)
find_program(MOE_NUNIT_CONSOLE nunit-console)
find_file(MOE_NUNIT_FRAMEWORK nunit.framework.dll
          PATHS /usr/lib/cli/nunit.framework-2.6.3 /usr/lib/mono/4.5 DOC "NUnit framework assembly")

# Go: the go command with cgo (the Go module needs nothing outside the standard library).
find_program(MOE_GO go)

set(_moe_java_ok OFF)
if(SWIG_FOUND AND Java_JAVAC_EXECUTABLE AND Java_JAR_EXECUTABLE AND MOE_JNI_INCLUDE_DIR)
  set(_moe_java_ok ON)
endif()
set(_moe_csharp_ok OFF)
if(SWIG_FOUND AND MOE_CSHARP_COMPILER AND MOE_MONO)
  set(_moe_csharp_ok ON)
endif()
set(_moe_go_ok OFF)
if(SWIG_FOUND AND MOE_GO)
  set(_moe_go_ok ON)
endif()

option(MOE_BUILD_JAVA "Build the Java binding (needs SWIG and a JDK)" ${_moe_java_ok})
option(MOE_BUILD_CSHARP "Build the C# binding (needs SWIG and Mono's mcs)" ${_moe_csharp_ok})
option(MOE_BUILD_GO "Build the Go binding (needs SWIG and Go)" ${_moe_go_ok})

# Where each binding's product lands, so examples can refer to it before bindings/ is processed.
set(MOE_JAVA_JAR "${PROJECT_BINARY_DIR}/bindings/java/moe.jar")
set(MOE_CSHARP_OUT "${PROJECT_BINARY_DIR}/bindings/csharp/out")
set(MOE_GO_MODULE "${PROJECT_BINARY_DIR}/bindings/go/module")
set(MOE_GO_ENV
    "GOPROXY=off" "GOFLAGS=-mod=mod" "GOENV=off" "CGO_ENABLED=1" "GOTOOLCHAIN=local" "GOWORK=off" "GO111MODULE=on"
    "GOCACHE=${PROJECT_BINARY_DIR}/bindings/go/cache"
    "GOPATH=${PROJECT_BINARY_DIR}/bindings/go/gopath"
    "PKG_CONFIG_PATH=${PROJECT_BINARY_DIR}/packaging/uninstalled"
    "LD_LIBRARY_PATH=${PROJECT_BINARY_DIR}/lib/api")

# Reference data for the binding tests: MOE_TESTDATA_DIR, set in the top-level CMakeLists.txt.
set(MOE_FIXTURE_MODEL
    "${MOE_TESTDATA_DIR}/fixtures/tiny-qwen2moe-f32/tiny-qwen2moe-f32.gguf")

# CTest reads tests only from directories where testing is enabled when they are created.
if(MOE_BUILD_TESTS)
  enable_testing()
endif()
