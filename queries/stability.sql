-- stability: the four within-session stability sub-scores (after the Agent Stability
-- Index), one row per trial: they catch a session that quietly gets worse (thrashing
-- between tools, looping on a call, burning tokens) with no error to show for it. Each
-- is in [0, 1], higher = more stable; heuristics, "look here" signals.
--
--   tool_usage_stability  1 - (distinct tools - 1) / distinct calls, clamped; 1 without
--                         calls. Low when the agent thrashes across a fresh tool on nearly
--                         every call. Two changes to the formula it follows, 1 - (distinct
--                         tools - 1) / (calls - 1): (a) over calls, not calls - 1: with
--                         calls - 1 a run that called two tools once each scored 0 and
--                         was flagged, a single switch read as a fresh tool on every call;
--                         one switch in two calls is half, on the floor and not below it,
--                         and a long run scores as before. (b) over distinct calls (tool,
--                         arguments): a repeated call is not progress, and counting it
--                         made a run that repeats calls look more concentrated, so more
--                         stable, than the healthy run it regressed from. Repeats are
--                         redundancy's to catch.
--   response_consistency  1 - min(1, cv) of the character counts of the assistant turns
--                         (LLM calls that returned text; a turn that only called tools is
--                         not a response, and counting it as 0 characters would flag
--                         every tool-using agent), cv = population std / mean; 1 with
--                         fewer than two turns or all empty.
--   redundancy            distinct (tool, canonical arguments) / tool calls; 1 without
--                         calls. Low when the agent loops on the same call. A call
--                         without recorded arguments counts as distinct (not known to
--                         repeat), here and in cost_per_progress.
--   cost_per_progress     2000 / max(2000, tokens / distinct calls), with tokens = input
--                         + output of all LLM calls; 1 when no tokens were spent, 0 when
--                         tokens were spent without a single distinct call. The 2000-token
--                         target is a relative anchor, not a price.
--   weakest_score         the lowest of the four.
--   drift_flags           sub-scores strictly below the default floor 0.5 (the CLI's
--                         --floor recomputes them for other floors).
CREATE OR REPLACE VIEW stability AS
WITH calls AS (
    SELECT trace_id,
        count(*) AS tool_calls,
        count(DISTINCT tool_name) AS distinct_tools,
        -- a call whose arguments were not recorded (content capture off; AutoGen's native
        -- spans never carry them) is not known to repeat another: it counts as distinct,
        -- else every agent traced without content would look like it loops
        count(DISTINCT (tool_name, coalesce(tool_args, 'unrecorded ' || span_id))) AS distinct_calls
    FROM steps WHERE step_kind = 'tool'
    GROUP BY trace_id
),
turns AS (
    SELECT trace_id, count(*) AS n_turns, avg(chars) AS mean_chars, stddev_pop(chars) AS sd_chars
    FROM (SELECT trace_id, length(coalesce(output_text, '')) AS chars
          FROM steps WHERE llm_call AND output_text IS NOT NULL)
    GROUP BY trace_id
),
scored AS (
    SELECT t.trace_id, t.scenario, t.version, t.run_id,
        CASE WHEN coalesce(c.distinct_calls, 0) = 0 THEN 1.0
             ELSE greatest(0.0, least(1.0, 1 - (c.distinct_tools - 1) / c.distinct_calls)) END
            AS tool_usage_stability,
        CASE WHEN coalesce(u.n_turns, 0) < 2 OR u.mean_chars = 0 THEN 1.0
             ELSE 1 - least(1.0, u.sd_chars / u.mean_chars) END AS response_consistency,
        CASE WHEN coalesce(c.tool_calls, 0) = 0 THEN 1.0 ELSE c.distinct_calls / c.tool_calls END AS redundancy,
        CASE WHEN coalesce(t.input_tokens, 0) + coalesce(t.output_tokens, 0) = 0 THEN 1.0
             WHEN coalesce(c.distinct_calls, 0) = 0 THEN 0.0
             ELSE 2000.0 / greatest(2000.0, (coalesce(t.input_tokens, 0) + coalesce(t.output_tokens, 0)) / c.distinct_calls)
        END AS cost_per_progress
    FROM trials t
    LEFT JOIN calls c USING (trace_id)
    LEFT JOIN turns u USING (trace_id)
)
SELECT *,
    least(tool_usage_stability, response_consistency, redundancy, cost_per_progress) AS weakest_score,
    list_filter(['tool_usage_stability', 'response_consistency', 'redundancy', 'cost_per_progress'],
                lambda name, i: [tool_usage_stability, response_consistency, redundancy, cost_per_progress][i] < 0.5)
        AS drift_flags
FROM scored;
