using System;
using System.Runtime.ExceptionServices;

namespace LibMoe {
  // What a handler threw while native code was calling it: kept, since no exception may cross
  // into C, and rethrown (with its stack) by the caller once the native call has returned.
  internal sealed class CallbackError {
    private Exception thrown;

    public bool Caught { get { return thrown != null; } }

    public void Capture(Exception e) {
      if (thrown == null) thrown = e;
    }

    // Throws what was kept, if anything, which is then forgotten.
    public void Rethrow() {
      Exception e = thrown;
      thrown = null;
      if (e != null) ExceptionDispatchInfo.Capture(e).Throw();
    }
  }
}
