package org.libmoe;

/** Which cached expert makes room when the expert cache is full ({@code moe_expert_eviction}). */
public enum ExpertEviction {
  /** The least recently used (the default). */
  LRU(0),
  /** The least frequently used (counts age over time), then the least recent. */
  LFRU(1);

  final int code;

  ExpertEviction(int code) {
    this.code = code;
  }
}
