package org.libmoe;

/** A model's hyper-parameters and vocabulary facts. */
public record ModelInfo(
    String architecture,
    String name,
    int layers,
    int embeddingSize,
    int heads,
    int kvHeads,
    int experts,
    int expertsUsed,
    int vocabularySize,
    int trainedContextLength,
    long totalParameters,
    long activeParameters,
    int bosToken,
    int eosToken,
    int eotToken,
    boolean hasTokenizer,
    boolean hasChatTemplate) {}
