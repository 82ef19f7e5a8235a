-- What the dashboard reads (issue 14): delivery attempts by time, for the overview's charts and
-- each endpoint's health over the last hour or day. Attempts are inserted roughly in started_at
-- order and never updated, so a BRIN index finds a recent window while costing next to nothing
-- on the dispatcher's hot path (a B-tree would add a third index write to every attempt).
CREATE INDEX kurir_attempts_started ON kurir_attempts USING brin (started_at);
