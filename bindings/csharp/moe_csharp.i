// C# part of moe.i: errors become LibMoe.MoeException (through SWIG's pending-exception
// mechanism, raised when the P/Invoke call returns), token lists, logits and expert counts cross
// as arrays in one copy, and strings use P/Invoke's default marshalling, which is UTF-8 on Mono and .NET on Linux and macOS.
// The generated layer is internal to the assembly: the hand-written classes are the API.

%include <arrays_csharp.i>

%{
#include <cstdlib>
#include <cstring>
%}

%typemap(csclassmodifiers) SWIGTYPE "internal class"
%pragma(csharp) moduleclassmodifiers="internal class"

// Raising MoeException: C++ calls a delegate registered at start-up, which parks the exception
// for the generated C# code to throw once the native call has unwound (nothing crosses C).
%insert(runtime) %{
typedef void (SWIGSTDCALL* MoeCsExceptionCallback)(int status, const char* message);
static MoeCsExceptionCallback moe_cs_exception_callback = nullptr;
extern "C" SWIGEXPORT void SWIGSTDCALL MoeCs_RegisterExceptionCallback(MoeCsExceptionCallback cb) {
  moe_cs_exception_callback = cb;
}
static void MoeCsSetPendingException(int status, const char* message) {
  moe_cs_exception_callback(status, message);
}
%}
%pragma(csharp) imclasscode=%{
  internal class MoeExceptionHelper {
    public delegate void Callback(int status, string message);
    static readonly Callback callback = SetPending;

    [global::System.Runtime.InteropServices.DllImport("$dllimport", EntryPoint="MoeCs_RegisterExceptionCallback")]
    static extern void MoeCs_RegisterExceptionCallback(Callback cb);

    // status -1 is moe_swig::kClosedStatus: a handle used after Dispose, raced with it.
    static void SetPending(int status, string message) {
      if (status == -1) {
        SWIGPendingException.Set(new global::System.ObjectDisposedException(null, message));
        return;
      }
      SWIGPendingException.Set(new LibMoe.MoeException((LibMoe.Status)status, message));
    }

    static MoeExceptionHelper() {
      MoeCs_RegisterExceptionCallback(callback);
    }
  }
  // Never read: creating it runs the static constructor that registers the callback.
#pragma warning disable 414
  static readonly MoeExceptionHelper moeExceptionHelper = new MoeExceptionHelper();
#pragma warning restore 414

  [global::System.Runtime.InteropServices.DllImport("$dllimport", EntryPoint="MoeCs_Free")]
  internal static extern void MoeCs_Free(global::System.IntPtr block);
%}

%exception %{
  try {
    $action
  } catch (const moe_swig::Error& e) {
    MoeCsSetPendingException(e.status(), e.what());
    return $null;
  } catch (const std::bad_alloc&) {
    MoeCsSetPendingException(MOE_ERROR_OUT_OF_MEMORY, "out of memory");
    return $null;
  } catch (const std::exception& e) {
    MoeCsSetPendingException(MOE_ERROR_INTERNAL, e.what());
    return $null;
  }
%}

// Token ids in: a pinned int[] plus its length.
%apply int INPUT[] { const int32_t* tokens }
%apply int INPUT[] { const int32_t* experts }  // DisableExperts, with its length

// Vectors out (token ids as int[], logits as float[], expert counts as long[]): C++ packs the
// vector into one malloc'd block, its element count (int64) then the elements; C# copies them
// with one Marshal.Copy and frees the block.
%{
template <typename T>
static void* MoeCsPack(const std::vector<T>& v) {
  void* block = std::malloc(sizeof(int64_t) + v.size() * sizeof(T));
  if (block == nullptr) return nullptr;  // C# throws OutOfMemoryException
  *static_cast<int64_t*>(block) = static_cast<int64_t>(v.size());
  if (!v.empty()) std::memcpy(static_cast<char*>(block) + sizeof(int64_t), v.data(), v.size() * sizeof(T));
  return block;
}
extern "C" SWIGEXPORT void SWIGSTDCALL MoeCs_Free(void* block) { std::free(block); }
%}
%define MOE_CS_ARRAY_OUT(CTYPE, CSTYPE)
%typemap(ctype) std::vector<CTYPE> "void*"
%typemap(imtype) std::vector<CTYPE> "global::System.IntPtr"
%typemap(cstype) std::vector<CTYPE> "CSTYPE[]"
%typemap(out) std::vector<CTYPE> %{ $result = MoeCsPack($1); %}
%typemap(csout, excode=SWIGEXCODE) std::vector<CTYPE> {
    global::System.IntPtr block = $imcall;$excode
    if (block == global::System.IntPtr.Zero) throw new global::System.OutOfMemoryException();
    try {
      int n = checked((int)global::System.Runtime.InteropServices.Marshal.ReadInt64(block));
      CSTYPE[] items = new CSTYPE[n];
      if (n > 0) global::System.Runtime.InteropServices.Marshal.Copy(
          new global::System.IntPtr(block.ToInt64() + sizeof(long)), items, 0, n);
      return items;
    } finally {
      $imclassname.MoeCs_Free(block);
    }
  }
%enddef
MOE_CS_ARRAY_OUT(int32_t, int)
MOE_CS_ARRAY_OUT(float, float)
MOE_CS_ARRAY_OUT(int64_t, long)
