package workflows

import (
	"errors"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
)

// LeaseError carries a lease's error as data: from a shard to its run, and from a host to its run for each
// member of a RunTasks batch. It becomes the same kind of Temporal error again, so that the run reads a task's
// end alike whichever execution held its lease and whether it came alone or in a batch.
type LeaseError struct {
	Kind    string              `json:"kind"` // application, canceled, timeout, other
	Type    string              `json:"type,omitempty"`
	Message string              `json:"message,omitempty"`
	Timeout enumspb.TimeoutType `json:"timeout,omitempty"`
	Details *TaskResult         `json:"details,omitempty"`
	Cause   *LeaseError         `json:"cause,omitempty"`
}

// LeaseErrorOf flattens an activity's error (the ActivityError wrapper dropped) into a LeaseError.
func LeaseErrorOf(err error) *LeaseError {
	var actErr *temporal.ActivityError
	if errors.As(err, &actErr) {
		err = actErr.Unwrap()
	}
	if err == nil {
		return nil
	}
	var res TaskResult
	switch e := err.(type) {
	case *temporal.ApplicationError:
		le := &LeaseError{Kind: "application", Type: e.Type(), Message: e.Message(), Cause: LeaseErrorOf(e.Unwrap())}
		if e.HasDetails() && e.Details(&res) == nil {
			le.Details = &res
		}
		return le
	case *temporal.CanceledError:
		le := &LeaseError{Kind: "canceled"}
		if e.HasDetails() && e.Details(&res) == nil {
			le.Details = &res
		}
		return le
	case *temporal.TimeoutError:
		return &LeaseError{Kind: "timeout", Timeout: e.TimeoutType(), Message: e.Error(), Cause: LeaseErrorOf(e.Unwrap())}
	}
	return &LeaseError{Kind: "other", Message: err.Error()}
}

// Err makes the Temporal error the LeaseError was made from again.
func (le *LeaseError) Err() error {
	if le == nil {
		return nil
	}
	var details []any
	if le.Details != nil {
		details = []any{*le.Details}
	}
	switch le.Kind {
	case "application":
		return temporal.NewApplicationErrorWithOptions(le.Message, le.Type, temporal.ApplicationErrorOptions{
			NonRetryable: true, Cause: le.Cause.Err(), Details: details})
	case "canceled":
		return temporal.NewCanceledError(details...)
	case "timeout":
		return temporal.NewTimeoutError(le.Timeout, le.Cause.Err())
	}
	return errors.New(le.Message)
}
