// Package raw is the SWIG-generated layer of the Go binding (moe.go and moe_wrap.cxx here are
// generated from bindings/moe.i at build time). Use package moe instead.
package raw

// #cgo pkg-config: moe
// #cgo CXXFLAGS: -std=c++17
import "C"
