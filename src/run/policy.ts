import { DEFAULT_GROUNDING_POLICY, GROUNDING_POLICIES } from '../grounding/index.ts';
import { RunPolicyError } from './run-errors.ts';
import { INT4_MAX } from './stored.ts';
import type { RunCompactionPolicy } from './types.ts';

/**
 * The defaults of run compaction (docs/runs.md): application thresholds on the
 * serialized request, not a provider's context window.
 */
export const DEFAULT_RUN_POLICY: Readonly<RunCompactionPolicy> = Object.freeze({
  enabled: true,
  thresholdBytes: 256 * 1024,
  targetBytes: 224 * 1024,
  compactAboveBytes: 0,
  minSavingBytes: 4 * 1024,
  summaryCapBytes: 6_000,
  minSummaryBytes: 256,
  keepRecentGroups: 3,
  // Room for the answer: a request that leaves none is not a request that fits.
  responseReserveBytes: 16 * 1024,
  summaryDeadlineMs: 120_000,
  leaseGraceMs: 30_000,
  maxAttempts: 2,
  maxSummaryInputBytes: 256 * 1024,
  // A plan of several checkpoints is carried out in one call, up to this many summaries.
  maxSummariesPerPrepare: 16,
  turnExcerptBytes: 8 * 1024,
  toolExcerptBytes: 1024,
  // A body this large inline would be an eighth of the threshold: larger ones are shown by excerpt and reference.
  inlineResultBytes: 32 * 1024,
  excerptBytes: 2 * 1024,
  catalogBytes: 4 * 1024,
  grounding: DEFAULT_GROUNDING_POLICY,
});

/**
 * The defaults overlaid with `overrides`, checked and frozen. A key that is
 * not a policy knob is refused: a misspelled one (`thresholdByte`) would
 * otherwise leave the default in force without a word. Integers are at most
 * 2147483647 (some reach integer parameters of queries; none needs more).
 * @throws RunPolicyError naming the first key or value that cannot work.
 */
export function resolvePolicy(overrides: Partial<RunCompactionPolicy> | undefined): Readonly<RunCompactionPolicy> {
  const policy: RunCompactionPolicy = { ...DEFAULT_RUN_POLICY };
  for (const [key, value] of Object.entries(overrides ?? {})) {
    if (!Object.hasOwn(DEFAULT_RUN_POLICY, key))
      throw new RunPolicyError(`policy.${key} is not a policy key (known: ${Object.keys(DEFAULT_RUN_POLICY).join(', ')})`);
    if (value !== undefined) (policy as unknown as Record<string, unknown>)[key] = value;
  }
  const integers: (keyof RunCompactionPolicy)[] = [
    'thresholdBytes',
    'targetBytes',
    'compactAboveBytes',
    'minSavingBytes',
    'summaryCapBytes',
    'minSummaryBytes',
    'keepRecentGroups',
    'responseReserveBytes',
    'summaryDeadlineMs',
    'leaseGraceMs',
    'maxAttempts',
    'maxSummaryInputBytes',
    'maxSummariesPerPrepare',
    'turnExcerptBytes',
    'toolExcerptBytes',
    'inlineResultBytes',
    'excerptBytes',
    'catalogBytes',
  ];
  for (const key of integers) {
    const v = policy[key];
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0 || v > INT4_MAX)
      throw new RunPolicyError(`policy.${key} must be an integer from 0 to ${INT4_MAX}, got ${String(v)}`);
  }
  if (typeof policy.enabled !== 'boolean') throw new RunPolicyError('policy.enabled must be a boolean');
  if (!GROUNDING_POLICIES.includes(policy.grounding))
    throw new RunPolicyError(`policy.grounding must be one of ${GROUNDING_POLICIES.join(', ')}, got ${String(policy.grounding)}`);
  if (policy.targetBytes > policy.thresholdBytes)
    throw new RunPolicyError(`policy.targetBytes (${policy.targetBytes}) must not exceed policy.thresholdBytes (${policy.thresholdBytes})`);
  if (policy.compactAboveBytes > policy.thresholdBytes)
    throw new RunPolicyError(
      `policy.compactAboveBytes (${policy.compactAboveBytes}) must not exceed policy.thresholdBytes (${policy.thresholdBytes})`,
    );
  if (policy.maxAttempts < 1 || policy.maxAttempts > 2)
    throw new RunPolicyError('policy.maxAttempts must be 1 or 2 (the database allows at most 2 per identity)');
  if (policy.summaryCapBytes < 1) throw new RunPolicyError('policy.summaryCapBytes must be at least 1');
  if (policy.maxSummariesPerPrepare < 1) throw new RunPolicyError('policy.maxSummariesPerPrepare must be at least 1');
  if (policy.summaryDeadlineMs < 1) throw new RunPolicyError('policy.summaryDeadlineMs must be at least 1');
  return Object.freeze(policy);
}
