-- What the dashboard reads (issue 14): delivery attempts by time, for the overview's charts and
-- each endpoint's health over the last hour or day. (PostgreSQL uses a BRIN index; InnoDB has
-- none, so this B-tree costs one more index write per attempt.)
CREATE INDEX kurir_attempts_started ON kurir_attempts (started_at);
