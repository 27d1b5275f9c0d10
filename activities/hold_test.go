package activities

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

func TestUntilServerAnswers_HoldsACallThroughTheServersSilence(t *testing.T) {
	silences := []error{
		serviceerror.NewUnavailable("connection refused"),
		serviceerror.NewDeadlineExceeded("deadline exceeded"),
		context.DeadlineExceeded,
		serviceerror.NewResourceExhausted(0, "too many updates"),
		client.NewWorkflowUpdateServiceTimeoutOrCanceledError(context.DeadlineExceeded),
	}
	tries := 0
	err := untilServerAnswers(context.Background(), nil, func() error {
		tries++
		if tries <= len(silences) {
			return silences[tries-1]
		}
		return nil
	})
	assert.NoError(t, err)
	assert.Equal(t, len(silences)+1, tries, "each silence is tried again")

	tries = 0
	notFound := serviceerror.NewNotFound("workflow execution already completed")
	err = untilServerAnswers(context.Background(), nil, func() error { tries++; return notFound })
	assert.Equal(t, notFound, err, "an answer is not held")
	assert.Equal(t, 1, tries)
}

func TestUntilServerAnswers_GivesUpWhenTheTaskEndsOrItsRequestGoes(t *testing.T) {
	down := serviceerror.NewUnavailable("connection refused")
	ended := make(chan struct{})
	time.AfterFunc(300*time.Millisecond, func() { close(ended) })
	err := untilServerAnswers(context.Background(), ended, func() error { return down })
	assert.Equal(t, down, err, "the last silence")

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = untilServerAnswers(ctx, nil, func() error { return down })
	assert.Equal(t, down, err)
	assert.Error(t, ctx.Err())
}
