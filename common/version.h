/*  common/version.h: the release of agenthold this binary is. hostd, the
    server and sandboxd report it at connect, with their protocol version,
    so that a mismatch can say what runs and what to deploy.           */
#ifndef AH_VERSION_H
#define AH_VERSION_H

#define AH_VERSION  "0.1.0"

#endif
