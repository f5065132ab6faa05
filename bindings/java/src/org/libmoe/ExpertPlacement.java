package org.libmoe;

/**
 * Where one expert lives ({@code moe_expert_placement}).
 *
 * @param tier its placement: resident, cached or pinned
 * @param inMemory whether its weights are in memory now
 * @param bytes its gate, up and down matrices as the model file stores them
 * @param weightTypes their types as stored, "gate/up/down", e.g. "Q4_K/Q4_K/Q6_K"
 */
public record ExpertPlacement(ExpertTier tier, boolean inMemory, long bytes, String weightTypes) {}
