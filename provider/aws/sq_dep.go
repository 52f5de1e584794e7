package aws

import _ "github.com/aws/aws-sdk-go-v2/service/servicequotas"
