package org.libmoe;

/** Where an expert lives ({@code moe_expert_tier}). */
public enum ExpertTier {
  /** Loaded with the model, always in memory. */
  RESIDENT(0),
  /** Read from the model file into the expert cache when a step needs it. */
  CACHED(1),
  /** In the expert cache and never evicted. */
  PINNED(2);

  final int code;

  ExpertTier(int code) {
    this.code = code;
  }

  static ExpertTier fromCode(int code) {
    for (ExpertTier t : values()) {
      if (t.code == code) return t;
    }
    throw new IllegalStateException("unknown expert tier " + code);
  }
}
