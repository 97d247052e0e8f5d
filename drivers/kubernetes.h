/*  drivers/kubernetes.h: the Kubernetes backend (docs/kubernetes.md).

    Speaks the cluster's REST API over HTTPS with libcurl (kubectl is never
    used), with the credentials of a kubeconfig file or of the service
    account of the Pod the server runs in. Per agent: a
    PersistentVolumeClaim for /home/agent, a Pod whose entrypoint is
    sandboxd (delivered by an init container from
    sandbox.kubernetes.sandboxd_image), a Secret with boot.json per boot,
    and a NetworkPolicy that lets the Pod reach the server's tunnel alone
    (everything, when its runtime needs a network).                    */
#ifndef AH_KUBERNETES_H
#define AH_KUBERNETES_H

#include "drivers/driver.h"
#include "config/config.h"

//  config is borrowed and must outlive the driver. Reads the credentials
//  (sandbox.kubernetes.kubeconfig, or in-cluster) but does not need the
//  cluster to answer. NULL with *err (caller frees).
ah_driver_t *ah_kubernetes_driver_new (const ah_config_t *config, char **err);

#endif
