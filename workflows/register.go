package workflows

import "go.temporal.io/sdk/workflow"

func workflowRegisterOptions() workflow.RegisterOptions {
	return workflow.RegisterOptions{Name: WorkflowType}
}

// RegisterOptions names the ClusterRun workflow for worker.RegisterWorkflowWithOptions.
var RegisterOptions = workflowRegisterOptions()
