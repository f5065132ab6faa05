module github.com/libmoe/moe/examples/stream

go 1.19

require github.com/libmoe/moe v0.0.0

// The binding module; the build points this at its assembled copy (see CMakeLists.txt).
replace github.com/libmoe/moe => ../../bindings/go
