// Go part of moe.i: Go has no exceptions, so a failed call parks its moe_swig::Error in a
// thread-local slot that the hand-written wrapper collects right after the call, with the
// goroutine locked to its OS thread in between (see call() in moe.go). Strings are Go strings
// (bytes, so UTF-8 passes through untouched); token lists are []int32, copied once each way.

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

// Token ids out: a []int32 copied from C memory, which is then freed.
%typemap(gotype) std::vector<int32_t> "[]int32"
%typemap(out) std::vector<int32_t> %{
  {
    const std::vector<int32_t>& ids = $1;
    $result.array = ids.empty() ? nullptr : std::malloc(ids.size() * sizeof(int32_t));
    if (!ids.empty()) std::memcpy($result.array, ids.data(), ids.size() * sizeof(int32_t));
    $result.len = $result.cap = static_cast<intgo>(ids.size());
  }
%}
%typemap(goout) std::vector<int32_t> %{
  {
    ids := make([]int32, len($1))
    copy(ids, $1)
    if len($1) > 0 {
      Swig_free(uintptr(unsafe.Pointer(&$1[0])))
    }
    $result = ids
  }
%}
