// C# part of moe.i: errors become LibMoe.MoeException (through SWIG's pending-exception
// mechanism, raised when the P/Invoke call returns), token lists cross as int[] in one copy, and
// strings use P/Invoke's default marshalling, which is UTF-8 on Mono and .NET on Linux and macOS.
// The generated layer is internal to the assembly: the hand-written classes are the API.

%include <arrays_csharp.i>

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

    static void SetPending(int status, string message) {
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

  [global::System.Runtime.InteropServices.DllImport("$dllimport", EntryPoint="MoeCs_IntVectorSize")]
  internal static extern int MoeCs_IntVectorSize(global::System.IntPtr v);
  [global::System.Runtime.InteropServices.DllImport("$dllimport", EntryPoint="MoeCs_IntVectorCopy")]
  internal static extern void MoeCs_IntVectorCopy(global::System.IntPtr v, [global::System.Runtime.InteropServices.Out] int[] to);
  [global::System.Runtime.InteropServices.DllImport("$dllimport", EntryPoint="MoeCs_IntVectorFree")]
  internal static extern void MoeCs_IntVectorFree(global::System.IntPtr v);
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

// Token ids out: int[], filled by one copy from a vector the wrapper frees.
%{
extern "C" SWIGEXPORT int SWIGSTDCALL MoeCs_IntVectorSize(void* v) {
  return static_cast<int>(static_cast<std::vector<int32_t>*>(v)->size());
}
extern "C" SWIGEXPORT void SWIGSTDCALL MoeCs_IntVectorCopy(void* v, int32_t* to) {
  const std::vector<int32_t>& ids = *static_cast<std::vector<int32_t>*>(v);
  std::copy(ids.begin(), ids.end(), to);
}
extern "C" SWIGEXPORT void SWIGSTDCALL MoeCs_IntVectorFree(void* v) {
  delete static_cast<std::vector<int32_t>*>(v);
}
%}
%typemap(ctype) std::vector<int32_t> "void*"
%typemap(imtype) std::vector<int32_t> "global::System.IntPtr"
%typemap(cstype) std::vector<int32_t> "int[]"
%typemap(out) std::vector<int32_t> %{ $result = new std::vector<int32_t>($1); %}
%typemap(csout, excode=SWIGEXCODE) std::vector<int32_t> {
    global::System.IntPtr v = $imcall;$excode
    try {
      int[] ids = new int[$imclassname.MoeCs_IntVectorSize(v)];
      if (ids.Length > 0) $imclassname.MoeCs_IntVectorCopy(v, ids);
      return ids;
    } finally {
      $imclassname.MoeCs_IntVectorFree(v);
    }
  }
