"""The pure core: the allocation problem and its answer, DRF and H-DRF by progressive filling,
admission, the queue, quotas, fair share, the plan of limits and the views' numbers. No I/O,
no clock: time and facts are passed in."""
