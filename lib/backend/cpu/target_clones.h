// Function multi-versioning for plain C++ loops the compiler vectorizes per instruction set.
#pragma once

// The resolvers that pick a version run while the dynamic loader relocates the library, before
// ThreadSanitizer's runtime has started, and crash when instrumented: ThreadSanitizer builds get
// the portable version alone.
#if defined(__SANITIZE_THREAD__)
#define MOE_TARGET_CLONES(...)
#else
#define MOE_TARGET_CLONES(...) __attribute__((target_clones(__VA_ARGS__)))
#endif
