// Go part of moe.i: Go has no exceptions, so a failed call parks its moe_swig::Error in a
// thread-local slot that the hand-written wrapper collects right after the call, with the
// goroutine locked to its OS thread in between (see call() in moe.go). Strings are Go strings
// (bytes, so UTF-8 passes through untouched); token lists are []int32, copied once each way;
// logits and expert counts come back as []float32 and []int64.

%{
#include <cstdlib>
#include <cstring>
namespace moe_go {
thread_local int pending_status = 0;
thread_local std::string pending_message;
inline void SetPending(int status, const char* message) {
  pending_status = status;
  pending_message = message;
}
}  // namespace moe_go
%}

%exception %{
  try {
    $action
  } catch (const moe_swig::Error& e) {
    moe_go::SetPending(e.status(), e.what());
  } catch (const std::bad_alloc&) {
    moe_go::SetPending(MOE_ERROR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    moe_go::SetPending(MOE_ERROR_INTERNAL, e.what());
  }
%}

%rename("%s") moe_go;
%rename("%s") moe_go::TakeErrorStatus;
%rename("%s") moe_go::ErrorMessage;
%exception moe_go::TakeErrorStatus;
%exception moe_go::ErrorMessage;
%inline %{
namespace moe_go {
// The status of the last failed call on this thread (0 if none), clearing it.
inline int TakeErrorStatus() {
  int s = pending_status;
  pending_status = 0;
  return s;
}
inline std::string ErrorMessage() { return pending_message; }
}  // namespace moe_go
%}

// Token ids in: a []int32, read in place for the duration of the call.
%typemap(gotype) (const int32_t* tokens, size_t n_tokens) "[]int32"
%typemap(in) (const int32_t* tokens, size_t n_tokens) %{
  $1 = ($1_ltype)$input.array;
  $2 = static_cast<size_t>($input.len);
%}

// Expert ids in (DisableExperts): as token ids.
%apply (const int32_t* tokens, size_t n_tokens) { (const int32_t* experts, size_t n_experts) }

// Vectors out (token ids as []int32, logits as []float32, expert counts as []int64): copied into
// C memory, then into a Go slice, and the C memory freed.
%define MOE_GO_SLICE_OUT(CTYPE, GOTYPE)
%typemap(gotype) std::vector<CTYPE> "[]GOTYPE"
%typemap(out) std::vector<CTYPE> %{
  {
    const std::vector<CTYPE>& v = $1;
    $result.array = v.empty() ? nullptr : std::malloc(v.size() * sizeof(CTYPE));
    if (!v.empty()) std::memcpy($result.array, v.data(), v.size() * sizeof(CTYPE));
    $result.len = $result.cap = static_cast<intgo>(v.size());
  }
%}
%typemap(goout) std::vector<CTYPE> %{
  {
    items := make([]GOTYPE, len($1))
    copy(items, $1)
    if len($1) > 0 {
      Swig_free(uintptr(unsafe.Pointer(&$1[0])))
    }
    $result = items
  }
%}
%enddef
MOE_GO_SLICE_OUT(int32_t, int32)
MOE_GO_SLICE_OUT(float, float32)
MOE_GO_SLICE_OUT(int64_t, int64)
