// The one SWIG interface of libmoe, shared by Java, C# and Go (OR-Tools style): everything is
// ignored, then a short whitelist of the glue in moe_swig.h is wrapped. The per-language parts
// (java/moe_java.i, csharp/moe_csharp.i, go/moe_go.i) hold only what differs: how
// moe_swig::Error becomes an exception or error value, and how strings and token arrays cross.
//
// The SWIG-generated layer is internal to each binding; the hand-written classes over it
// (Model, Context, ...) are the API.
%module(directors="1") moe

%{
#include "moe_swig.h"
%}

%include <stdint.i>
%include <std_string.i>

// Ignore everything, then wrap the whitelist below.
%ignore "";
%define MOE_WRAP(name) %rename("%s") name; %enddef

MOE_WRAP(moe_swig)
MOE_WRAP(moe_swig::VersionString)
MOE_WRAP(moe_swig::StatusString)

MOE_WRAP(moe_swig::ProgressSink)
MOE_WRAP(moe_swig::ProgressSink::~ProgressSink)
MOE_WRAP(moe_swig::ProgressSink::ProgressSink)
MOE_WRAP(moe_swig::ProgressSink::OnProgress)
MOE_WRAP(moe_swig::TokenSink)
MOE_WRAP(moe_swig::TokenSink::~TokenSink)
MOE_WRAP(moe_swig::TokenSink::TokenSink)
MOE_WRAP(moe_swig::TokenSink::OnToken)
MOE_WRAP(moe_swig::LogSink)
MOE_WRAP(moe_swig::LogSink::~LogSink)
MOE_WRAP(moe_swig::LogSink::LogSink)
MOE_WRAP(moe_swig::LogSink::OnLog)
MOE_WRAP(moe_swig::SetLogSink)
MOE_WRAP(moe_swig::InLogCallback)
// The language subclasses them: these calls come back up from C.
%feature("director") moe_swig::ProgressSink;
%feature("director") moe_swig::TokenSink;
%feature("director") moe_swig::LogSink;

MOE_WRAP(moe_swig::NativeChat)
MOE_WRAP(moe_swig::NativeChat::NativeChat)
MOE_WRAP(moe_swig::NativeChat::~NativeChat)
MOE_WRAP(moe_swig::NativeChat::Add)

MOE_WRAP(moe_swig::NativeModelInfo)
MOE_WRAP(moe_swig::NativeModelInfo::NativeModelInfo)
MOE_WRAP(moe_swig::NativeModelInfo::~NativeModelInfo)
MOE_WRAP(moe_swig::NativeModelInfo::n_layer)
MOE_WRAP(moe_swig::NativeModelInfo::n_embd)
MOE_WRAP(moe_swig::NativeModelInfo::n_head)
MOE_WRAP(moe_swig::NativeModelInfo::n_head_kv)
MOE_WRAP(moe_swig::NativeModelInfo::n_expert)
MOE_WRAP(moe_swig::NativeModelInfo::n_expert_used)
MOE_WRAP(moe_swig::NativeModelInfo::n_vocab)
MOE_WRAP(moe_swig::NativeModelInfo::n_ctx_train)
MOE_WRAP(moe_swig::NativeModelInfo::n_params_total)
MOE_WRAP(moe_swig::NativeModelInfo::n_params_active)
MOE_WRAP(moe_swig::NativeModelInfo::bos_token)
MOE_WRAP(moe_swig::NativeModelInfo::eos_token)
MOE_WRAP(moe_swig::NativeModelInfo::eot_token)
MOE_WRAP(moe_swig::NativeModelInfo::has_tokenizer)
MOE_WRAP(moe_swig::NativeModelInfo::has_chat_template)

MOE_WRAP(moe_swig::NativeStats)
MOE_WRAP(moe_swig::NativeStats::NativeStats)
MOE_WRAP(moe_swig::NativeStats::~NativeStats)
MOE_WRAP(moe_swig::NativeStats::prompt_tokens)
MOE_WRAP(moe_swig::NativeStats::generated_tokens)
MOE_WRAP(moe_swig::NativeStats::prompt_seconds)
MOE_WRAP(moe_swig::NativeStats::generate_seconds)
MOE_WRAP(moe_swig::NativeStats::prompt_tokens_per_second)
MOE_WRAP(moe_swig::NativeStats::generate_tokens_per_second)
MOE_WRAP(moe_swig::NativeStats::active_fraction)
MOE_WRAP(moe_swig::NativeStats::attention_seconds)
MOE_WRAP(moe_swig::NativeStats::router_seconds)
MOE_WRAP(moe_swig::NativeStats::experts_seconds)
MOE_WRAP(moe_swig::NativeStats::head_seconds)
MOE_WRAP(moe_swig::NativeStats::sampling_seconds)
MOE_WRAP(moe_swig::NativeStats::active_params_per_token)
MOE_WRAP(moe_swig::NativeStats::mean_router_entropy)
MOE_WRAP(moe_swig::NativeStats::weight_bytes_read)
MOE_WRAP(moe_swig::NativeStats::finish_reason)
MOE_WRAP(moe_swig::NativeStats::expert_cache_hits)
MOE_WRAP(moe_swig::NativeStats::expert_cache_misses)
MOE_WRAP(moe_swig::NativeStats::expert_bytes_read)
MOE_WRAP(moe_swig::NativeStats::expert_read_seconds)
MOE_WRAP(moe_swig::NativeStats::expert_wait_seconds)
MOE_WRAP(moe_swig::NativeStats::expert_prefetches)
MOE_WRAP(moe_swig::NativeStats::expert_prefetch_hits)
MOE_WRAP(moe_swig::NativeStats::expert_prefetch_wasted_bytes)
MOE_WRAP(moe_swig::NativeStats::expert_predicted)
MOE_WRAP(moe_swig::NativeStats::expert_predicted_right)
MOE_WRAP(moe_swig::NativeExpertPlacement)
MOE_WRAP(moe_swig::NativeExpertPlacement::NativeExpertPlacement)
MOE_WRAP(moe_swig::NativeExpertPlacement::~NativeExpertPlacement)
MOE_WRAP(moe_swig::NativeExpertPlacement::tier)
MOE_WRAP(moe_swig::NativeExpertPlacement::in_memory)
MOE_WRAP(moe_swig::NativeExpertPlacement::bytes)
MOE_WRAP(moe_swig::NativeExpertPlacement::WeightTypes)
MOE_WRAP(moe_swig::kLayerHits)
MOE_WRAP(moe_swig::kLayerMisses)
MOE_WRAP(moe_swig::kLayerBytesRead)
MOE_WRAP(moe_swig::kLayerReadNanos)
MOE_WRAP(moe_swig::kLayerWaitNanos)
MOE_WRAP(moe_swig::kLayerPrefetches)
MOE_WRAP(moe_swig::kLayerPrefetchHits)
MOE_WRAP(moe_swig::kLayerPrefetchWastedBytes)
MOE_WRAP(moe_swig::kLayerPredicted)
MOE_WRAP(moe_swig::kLayerPredictedRight)
MOE_WRAP(moe_swig::kLayerExpertsInMemory)
MOE_WRAP(moe_swig::kExpertLayerStatFields)

MOE_WRAP(moe_swig::NativeGenerateOptions)
MOE_WRAP(moe_swig::NativeGenerateOptions::NativeGenerateOptions)
MOE_WRAP(moe_swig::NativeGenerateOptions::~NativeGenerateOptions)
MOE_WRAP(moe_swig::NativeGenerateOptions::AddStop)
MOE_WRAP(moe_swig::NativeGenerateOptions::ClearStops)
MOE_WRAP(moe_swig::NativeGenerateOptions::AddLogitBias)
MOE_WRAP(moe_swig::NativeGenerateOptions::max_tokens)
MOE_WRAP(moe_swig::NativeGenerateOptions::temperature)
MOE_WRAP(moe_swig::NativeGenerateOptions::top_k)
MOE_WRAP(moe_swig::NativeGenerateOptions::top_p)
MOE_WRAP(moe_swig::NativeGenerateOptions::min_p)
MOE_WRAP(moe_swig::NativeGenerateOptions::repeat_penalty)
MOE_WRAP(moe_swig::NativeGenerateOptions::frequency_penalty)
MOE_WRAP(moe_swig::NativeGenerateOptions::presence_penalty)
MOE_WRAP(moe_swig::NativeGenerateOptions::penalty_last_n)
MOE_WRAP(moe_swig::NativeGenerateOptions::seed)
MOE_WRAP(moe_swig::NativeGenerateOptions::parse_special)

MOE_WRAP(moe_swig::NativeModel)
MOE_WRAP(moe_swig::NativeModel::~NativeModel)
MOE_WRAP(moe_swig::NativeModel::Load)
MOE_WRAP(moe_swig::NativeModel::Close)
MOE_WRAP(moe_swig::NativeModel::IsOpen)
MOE_WRAP(moe_swig::NativeModel::Info)
MOE_WRAP(moe_swig::NativeModel::ExpertPlacement)
MOE_WRAP(moe_swig::NativeModel::PinExpert)
MOE_WRAP(moe_swig::NativeModel::UnpinExpert)
MOE_WRAP(moe_swig::NativeModel::Warmup)
MOE_WRAP(moe_swig::NativeModel::Architecture)
MOE_WRAP(moe_swig::NativeModel::Name)
MOE_WRAP(moe_swig::NativeModel::ChatTemplate)
MOE_WRAP(moe_swig::NativeModel::Tokenize)
MOE_WRAP(moe_swig::NativeModel::Detokenize)
MOE_WRAP(moe_swig::NativeModel::ApplyChatTemplate)
%newobject moe_swig::NativeModel::Load;
// The layout constants of ExpertLayerStats as compile-time constants, not getters.
#if defined(SWIGJAVA)
%javaconst(1);
#elif defined(SWIGCSHARP)
%csconst(1);
#endif

MOE_WRAP(moe_swig::NativeContext)
MOE_WRAP(moe_swig::NativeContext::NativeContext)
MOE_WRAP(moe_swig::NativeContext::~NativeContext)
MOE_WRAP(moe_swig::NativeContext::Close)
MOE_WRAP(moe_swig::NativeContext::IsOpen)
MOE_WRAP(moe_swig::NativeContext::Cancel)
MOE_WRAP(moe_swig::NativeContext::Reset)
MOE_WRAP(moe_swig::NativeContext::Truncate)
MOE_WRAP(moe_swig::NativeContext::NPast)
MOE_WRAP(moe_swig::NativeContext::NCtx)
MOE_WRAP(moe_swig::NativeContext::Generate)
MOE_WRAP(moe_swig::NativeContext::GenerateTokens)
MOE_WRAP(moe_swig::NativeContext::Stats)
MOE_WRAP(moe_swig::NativeContext::ExpertCounts)
MOE_WRAP(moe_swig::NativeContext::ExpertLayerStats)
MOE_WRAP(moe_swig::NativeContext::WriteRoutingProfile)
MOE_WRAP(moe_swig::NativeContext::NExpert)
MOE_WRAP(moe_swig::NativeContext::Decode)
MOE_WRAP(moe_swig::NativeContext::Logits)
MOE_WRAP(moe_swig::NativeContext::Sample)

MOE_WRAP(moe_swig::NativeDetokenizer)
MOE_WRAP(moe_swig::NativeDetokenizer::NativeDetokenizer)
MOE_WRAP(moe_swig::NativeDetokenizer::~NativeDetokenizer)
MOE_WRAP(moe_swig::NativeDetokenizer::Close)
MOE_WRAP(moe_swig::NativeDetokenizer::IsOpen)
MOE_WRAP(moe_swig::NativeDetokenizer::Push)

// Per language: errors, strings, token arrays, logits (float) and expert counts (int64).
#if defined(SWIGJAVA)
%include "java/moe_java.i"
#elif defined(SWIGCSHARP)
%include "csharp/moe_csharp.i"
#elif defined(SWIGGO)
%include "go/moe_go.i"
#endif

%include "moe_swig.h"
