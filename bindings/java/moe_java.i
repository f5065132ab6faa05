// Java part of moe.i: errors become org.libmoe.MoeException, strings cross JNI as UTF-8 byte[]
// (JNI's own string functions speak "modified UTF-8", which mangles emoji and NUL), token lists
// cross as int[]. The generated classes are package-private in org.libmoe: only the hand-written
// classes there are public.

%{
#include <cstring>
#include <vector>

// Throws org.libmoe.MoeException(status, utf8 message) into the JVM; a closed handle is an
// IllegalStateException, as Java expects of a closed resource.
static void MoeThrowJava(JNIEnv* jenv, int status, const char* message) {
  if (status == moe_swig::kClosedStatus) {
    jclass ise = jenv->FindClass("java/lang/IllegalStateException");
    if (ise != nullptr) jenv->ThrowNew(ise, message);
    return;
  }
  jclass cls = jenv->FindClass("org/libmoe/MoeException");
  if (cls == nullptr) return;  // NoClassDefFoundError is pending instead
  jmethodID ctor = jenv->GetMethodID(cls, "<init>", "(I[B)V");
  if (ctor == nullptr) return;
  jsize n = static_cast<jsize>(std::strlen(message));
  jbyteArray bytes = jenv->NewByteArray(n);
  if (bytes == nullptr) return;
  jenv->SetByteArrayRegion(bytes, 0, n, reinterpret_cast<const jbyte*>(message));
  jobject error = jenv->NewObject(cls, ctor, static_cast<jint>(status), bytes);
  if (error != nullptr) jenv->Throw(static_cast<jthrowable>(error));
}
%}

%exception {
  try {
    $action
  } catch (const moe_swig::Error& e) {
    MoeThrowJava(jenv, e.status(), e.what());
    return $null;
  } catch (const std::bad_alloc& e) {
    MoeThrowJava(jenv, MOE_ERROR_OUT_OF_MEMORY, "out of memory");
    return $null;
  } catch (const std::exception& e) {
    MoeThrowJava(jenv, MOE_ERROR_INTERNAL, e.what());
    return $null;
  }
}

// Package-private generated layer, loaded through NativeLibrary (which knows the jar layout).
%typemap(javaclassmodifiers) SWIGTYPE "class"
%pragma(java) moduleclassmodifiers="final class"
%pragma(java) jniclassclassmodifiers="final class"
%pragma(java) jniclasscode=%{
  static {
    NativeLibrary.load();
  }
%}

// std::string <-> byte[] (UTF-8); the Java classes decode with StandardCharsets.UTF_8.
%typemap(jni) std::string, const std::string& "jbyteArray"
%typemap(jtype) std::string, const std::string& "byte[]"
%typemap(jstype) std::string, const std::string& "byte[]"
%typemap(javain) std::string, const std::string& "$javainput"
%typemap(javaout) std::string, const std::string& { return $jnicall; }
%typemap(in) const std::string& (std::string copy) %{
  if (!$input) {
    SWIG_JavaThrowException(jenv, SWIG_JavaNullPointerException, "null string");
    return $null;
  }
  copy.resize(static_cast<size_t>(jenv->GetArrayLength($input)));
  if (!copy.empty())
    jenv->GetByteArrayRegion($input, 0, static_cast<jsize>(copy.size()),
                             reinterpret_cast<jbyte*>(&copy[0]));
  $1 = &copy;
%}
%typemap(out) std::string %{
  $result = jenv->NewByteArray(static_cast<jsize>($1.size()));
  if ($result && !$1.empty())
    jenv->SetByteArrayRegion($result, 0, static_cast<jsize>($1.size()),
                             reinterpret_cast<const jbyte*>($1.data()));
%}
%typemap(directorin, descriptor="[B") const std::string& %{
  $input = jenv->NewByteArray(static_cast<jsize>($1.size()));
  if ($input && !$1.empty())
    jenv->SetByteArrayRegion($input, 0, static_cast<jsize>($1.size()),
                             reinterpret_cast<const jbyte*>($1.data()));
  Swig::LocalRefGuard $1_refguard(jenv, $input);
%}
%typemap(javadirectorin) const std::string& "$jniinput"

// Token ids in: int[]. Copied, not pinned: generation calls back into Java, which a pinned
// (critical) array would forbid.
%typemap(jni) (const int32_t* tokens, size_t n_tokens) "jintArray"
%typemap(jtype) (const int32_t* tokens, size_t n_tokens) "int[]"
%typemap(jstype) (const int32_t* tokens, size_t n_tokens) "int[]"
%typemap(javain) (const int32_t* tokens, size_t n_tokens) "$javainput"
%typemap(in) (const int32_t* tokens, size_t n_tokens) (std::vector<int32_t> copy) %{
  if (!$input) {
    SWIG_JavaThrowException(jenv, SWIG_JavaNullPointerException, "null token array");
    return $null;
  }
  copy.resize(static_cast<size_t>(jenv->GetArrayLength($input)));
  if (!copy.empty())
    jenv->GetIntArrayRegion($input, 0, static_cast<jsize>(copy.size()),
                            reinterpret_cast<jint*>(copy.data()));
  $1 = copy.data();
  $2 = copy.size();
%}

// Expert ids in (DisableExperts): as token ids.
%apply (const int32_t* tokens, size_t n_tokens) { (const int32_t* experts, size_t n_experts) }

// Vectors out: token ids as int[], logits as float[], expert counts as long[] (one copy each).
%define MOE_JAVA_ARRAY_OUT(CTYPE, JNITYPE, JTYPE, NEW, SET, JELEM)
%typemap(jni) std::vector<CTYPE> "JNITYPE"
%typemap(jtype) std::vector<CTYPE> "JTYPE"
%typemap(jstype) std::vector<CTYPE> "JTYPE"
%typemap(javaout) std::vector<CTYPE> { return $jnicall; }
%typemap(out) std::vector<CTYPE> %{
  {
    const std::vector<CTYPE>& v = $1;
    $result = jenv->NEW(static_cast<jsize>(v.size()));
    if ($result && !v.empty())
      jenv->SET($result, 0, static_cast<jsize>(v.size()), reinterpret_cast<const JELEM*>(v.data()));
  }
%}
%enddef
MOE_JAVA_ARRAY_OUT(int32_t, jintArray, int[], NewIntArray, SetIntArrayRegion, jint)
MOE_JAVA_ARRAY_OUT(float, jfloatArray, float[], NewFloatArray, SetFloatArrayRegion, jfloat)
MOE_JAVA_ARRAY_OUT(int64_t, jlongArray, long[], NewLongArray, SetLongArrayRegion, jlong)
