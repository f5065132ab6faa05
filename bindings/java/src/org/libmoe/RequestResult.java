package org.libmoe;

/**
 * What an {@link Engine} request produced, and how it went.
 *
 * @param text the generated text
 * @param tokens the generated token ids
 * @param finishReason why it ended
 * @param status {@link Status#OK}, {@link Status#CANCELLED}, or why its step failed
 * @param message the status's message ("" when OK)
 * @param promptTokens tokens of its prompt
 * @param prefixTokensReused prompt positions taken from KV blocks an earlier request computed
 * @param generatedTokens tokens generated
 * @param preemptions times it gave its KV blocks up (and was computed again)
 * @param queueSeconds from submission until first scheduled
 * @param firstTokenSeconds from submission until its first token
 * @param totalSeconds from submission until it finished
 * @param decodeTokensPerSecond generated tokens per second after the first
 * @param weightBytes weight bytes its tokens' computation touched (dense matrices, the routed
 *     experts each chose, the head where logits were computed), over every token computed
 * @param multiplyAdds multiply-adds of its tokens' matrix products and attention
 * @param decodeWeightBytesPerToken weight bytes per generated token
 * @param decodeMultiplyAddsPerToken multiply-adds per generated token
 */
public record RequestResult(String text, int[] tokens, FinishReason finishReason, Status status,
    String message, int promptTokens, int prefixTokensReused, int generatedTokens,
    int preemptions, double queueSeconds, double firstTokenSeconds, double totalSeconds,
    double decodeTokensPerSecond, long weightBytes, long multiplyAdds,
    double decodeWeightBytesPerToken, double decodeMultiplyAddsPerToken) {
  static RequestResult of(NativeRequestResult r) {
    return new RequestResult(Utf8.decode(r.Text()), r.Tokens(),
        FinishReason.fromCode(r.getFinish_reason()), Status.fromCode(r.getStatus()),
        Utf8.decode(r.Message()), r.getPrompt_tokens(), r.getPrefix_tokens_reused(),
        r.getGenerated_tokens(), r.getPreemptions(), r.getQueue_seconds(),
        r.getFirst_token_seconds(), r.getTotal_seconds(), r.getDecode_tokens_per_second(),
        r.getWeight_bytes(), r.getMultiply_adds(), r.getDecode_weight_bytes_per_token(),
        r.getDecode_multiply_adds_per_token());
  }
}
