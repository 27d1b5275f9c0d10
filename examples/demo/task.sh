#!/bin/sh
# One task of the demo cluster. Everything it knows about the cluster comes from clusterrun's environment.
# Between steps each task asks whether the run is being stopped (clusterrun stop, or the temporal CLI's stop
# signal) and, if so, ends cleanly inside its grace period, as a training loop saves a checkpoint and exits.
echo "I am $CLUSTERRUN_TASK (rank ${RANK:-none} of ${WORLD_SIZE:-?}) on host $CLUSTERRUN_HOST, attempt $CLUSTERRUN_ATTEMPT"
echo "TF_CONFIG=$TF_CONFIG"
echo "MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT"

# The check runs in the background, as the parameter server's sleep does, so that a SIGTERM meanwhile runs its
# trap at once and sh says nothing of the check it killed.
stop_if_asked() {
	clusterrun task should-stop >/dev/null &
	if wait $! 2>/dev/null; then
		echo "$1: stop asked, exiting cleanly"
		exit 0
	fi
}

case "$CLUSTERRUN_TASK_TYPE" in
ps)
	trap 'echo "parameter server: SIGTERM received, shutting down cleanly"; exit 0' TERM
	echo "parameter server: serving variables until the chief is done"
	# sleep in the background and wait: the trap runs at once, and the wait does not report the sleep the
	# stop killed ("Terminated").
	while :; do
		sleep 1 &
		wait $! 2>/dev/null
		stop_if_asked "parameter server"
	done
	;;
worker)
	i=1
	while [ "$i" -le "${STEPS:-4}" ]; do
		echo "worker step $i/${STEPS:-4}: computing gradients"
		sleep 1
		stop_if_asked worker
		i=$((i + 1))
	done
	echo "worker done"
	;;
chief)
	i=1
	while [ "$i" -le "${STEPS:-4}" ]; do
		echo "chief step $i/${STEPS:-4}: loss=$(awk "BEGIN{printf \"%.3f\", 1/($i+1)}")"
		sleep 1
		stop_if_asked chief
		i=$((i + 1))
	done
	printf '{"steps": %s, "final_loss": %s, "cluster_size": %s}\n' "${STEPS:-4}" "$(awk "BEGIN{printf \"%.3f\", 1/(${STEPS:-4}+1)}")" "$WORLD_SIZE" > "$CLUSTERRUN_RESULT_FILE"
	echo "chief: result written, exiting"
	;;
esac
