-- abstract_states: the abstract states of state coverage (the AgentAssay paper's state
-- abstraction π), one row per (trial, abstract state) with how often the trial visited
-- it. The abstraction is step_states'.
CREATE OR REPLACE VIEW abstract_states AS
SELECT trace_id, state, count(*) AS visits
FROM step_states
GROUP BY ALL;
