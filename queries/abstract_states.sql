-- abstract_states: the state abstraction π of paper Def. 4.6, one row per (trial, abstract
-- state) with how often the trial visited it.
--
-- An agent state σ = (location, variables, history) is abstracted to
--   agent_name | kind[:tool] of the step | kind[:tool] of the previous step in the trial
-- i.e. where the agent is (which agent, doing what) plus a one-step history window. Text,
-- arguments and counters are left out on purpose: they would make every state unique and
-- state coverage meaningless. State coverage is 1 - exp(-|distinct states| / λ).
CREATE OR REPLACE VIEW abstract_states AS
WITH labelled AS (
    SELECT trace_id, seq, coalesce(agent_name, '') AS agent, step_kind || coalesce(':' || tool_name, '') AS action
    FROM steps
)
SELECT trace_id,
    agent || ' | ' || action || ' | ' || coalesce(previous, 'start') AS state,
    count(*) AS visits
FROM (SELECT *, lag(action) OVER (PARTITION BY trace_id ORDER BY seq) AS previous FROM labelled)
GROUP BY ALL;
