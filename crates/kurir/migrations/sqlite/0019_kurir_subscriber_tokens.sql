-- Subscriber tokens and scoped listings (issue 29): a subscriber token's lists, and an operator's
-- lists filtered by `subscriber_id=`, walk one subscriber's rows in the listing's order.
--
-- Endpoints are listed by id: the index of 0016 on (subscriber_id) alone orders equal keys by
-- rowid, not by the text id, so a page of one subscriber's endpoints would read and sort all of
-- them. This one is walked from the cursor instead, and serves lookups by subscriber as well.
CREATE INDEX kurir_endpoints_subscriber_page ON kurir_endpoints (subscriber_id, id)
    WHERE subscriber_id IS NOT NULL;
DROP INDEX kurir_endpoints_subscriber_id;

-- A subscriber's tokens, newest first.
CREATE INDEX kurir_tokens_subscriber ON kurir_tokens (subscriber_id, id)
    WHERE subscriber_id IS NOT NULL;

-- The replays confined to a subscriber, newest first.
CREATE INDEX kurir_replays_subscriber ON kurir_replays (subscriber_id, id)
    WHERE subscriber_id IS NOT NULL;
